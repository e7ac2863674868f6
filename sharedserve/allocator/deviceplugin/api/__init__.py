"""Generated kubelet device plugin API v1beta1 (see README.md here for how to regenerate)."""
