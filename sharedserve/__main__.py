from sharedserve.cli import main

if __name__ == "__main__":  # a spawned worker process imports it too, as __mp_main__
    main()
