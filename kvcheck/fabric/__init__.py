"""``kvcheck fabric``: probe every prefill node to every decode node it sends KV to.

``topology`` (deployment -> nodes, required pairs by SGLang's rank mapping in
``mapping``, probe jobs, ``rounds``), ``worker`` (one kvcheck agent per node),
``control`` (etcd keys), ``coordinator`` (join, rounds, ClusterKit-style retests),
``findings`` and ``report`` (the matrix in terminal, JSON, JUnit), ``emit`` (Kubernetes
Job / srun line), ``launch`` (workers on this host or through a command prefix).
"""
