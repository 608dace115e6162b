"""Decoding engines. Importing this package does not import MLX; submodules that need it do."""
