"""``gpuclinic run``: supervise a training job through GPU faults and account for every interruption.

* :mod:`.runner` - the loop: start in its own process group, pass output through, watch, classify, restart.
* :mod:`.classify` - evidence -> root-cause class (GPU hardware, NCCL/network, CUDA OOM, ...).
* :mod:`.kernel` - XIDs and OOM-killer lines logged during an attempt.
* :mod:`.gpus` - CUDA_VISIBLE_DEVICES <-> UUIDs/bus ids, GPU sampling sources, excluding a bad GPU.
* :mod:`.ledger` - the runs/interruptions tables and the interruption report.
* :mod:`.procs` - process groups, subreaper, output pump, leftover cleanup.
"""
