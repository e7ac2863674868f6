from sharedserve.cli import main

main()
