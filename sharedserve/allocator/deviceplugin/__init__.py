"""The kubelet device plugin transport (v1beta1): vGPUs as an extended resource."""
