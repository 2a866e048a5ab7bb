"""gpuclinic: find what is hurting a remote NVIDIA GPU server, show the evidence, say what to do."""

__version__ = "0.1.0"
