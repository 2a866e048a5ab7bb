from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from realtools import in_ci, require

from .slurmcluster import SlurmCluster


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    tools = require("slurmctld", "slurmd", "munged", "scontrol")
    if os.geteuid() != 0:  # SlurmUser=root, slurmd launches jobs as their owner
        msg = "the single-node Slurm runs as root (SlurmUser=root)"
        if in_ci():
            pytest.fail(f"CI=true: {msg}", pytrace=False)
        pytest.skip(msg)
    c = SlurmCluster(tmp_path_factory.mktemp("slurm"), tools)
    try:
        c.start()
    except BaseException:
        c.stop()
        raise
    yield c
    c.stop()


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster) -> SlurmCluster:
    slurm_cluster.reset_node()
    return slurm_cluster
