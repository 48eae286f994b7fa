"""GGUF model files: a header-only reader and the GGML type tables."""
