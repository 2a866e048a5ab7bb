"""``gpuclinic accept``: measure a (rented) GPU server and score it against its spec and its peers.

Modules: ``specs`` (datasheet rows), ``model`` (items, scorecard, JSON schema), ``workload`` (the
stand-alone child script that runs on the user's own PyTorch/CuPy), ``runner`` (child process
control), ``simulate`` (scenario numbers), ``score`` (pure judgement), ``burn``, ``host``,
``checks`` (health, network, dcgmi), ``history`` (the store), ``render``/``html``, ``run``
(the orchestrator).
"""
