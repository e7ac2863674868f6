"""Generated kubelet plugin registration and DRA APIs (see README.md here for how to regenerate)."""
