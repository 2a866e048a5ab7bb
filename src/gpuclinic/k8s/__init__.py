"""Kubernetes integration: node-problem-detector plugin, GPUProblem node condition and taint, and the
device plugin's view of the node (sharing, MIG, allocatable vs physical GPUs) as evidence."""
