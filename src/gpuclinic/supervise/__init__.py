"""``gpuclinic run``: supervise a training job through GPU faults and account for every interruption.

* :mod:`.runner` - the loop: attempts, classify how each ended, restart or stop, ledger and alerts.
* :mod:`.attempt` - one attempt: its own process group, output passed through, kill deadline, hang, evidence.
* :mod:`.jobspec` - the options and the command line (``{resume}`` placeholders, redaction).
* :mod:`.gpuwatch` - sampling the job's GPUs during an attempt (activity, new faults).
* :mod:`.classify` - evidence -> root-cause class (GPU hardware, NCCL/network, CUDA OOM, ...).
* :mod:`.kernel` - XIDs and OOM-killer lines logged during an attempt.
* :mod:`.gpus` - CUDA_VISIBLE_DEVICES <-> UUIDs/bus ids, GPU sampling sources, excluding a bad GPU.
* :mod:`.ledger` - the runs/interruptions tables and the interruption report.
* :mod:`.procs` - process groups, subreaper, output pump, leftover cleanup.
"""
