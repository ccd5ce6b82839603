"""Running a plan's streams on many machines: ``--executor ray`` and ``--executor slurm``.

Nothing here is imported by a local run (``tokenworth_agent.experiment.executor.EXECUTORS`` names these
modules as strings), so neither Ray nor submitit is on the import path of ``tokenworth_jax`` or
of ``tokenworth run``. What they share, and what they do not:

* :mod:`.leases` — the driver's queue of pending streams (:class:`~.leases.StreamLeases`, no Ray
  in it): leases by name, a fair share per worker, busy streams deferred, a dead worker's streams
  back at the front;
* :mod:`.worker` — what every worker does, wherever it runs: make its backbone after applying its
  own GPU's split, then keep a batch of streams live in the engine and take the next as one ends
  (the engine's ``source``), writing ``node.json`` and checking before each commit that it still
  owns the stream;
* :mod:`.ray_cluster` — joining a Ray cluster fast or refusing it in one line, surveying its
  nodes, the placement, and the shared-storage check;
* :mod:`.ray_executor` — :class:`~.ray_executor.RayExecutor`: the queue as an actor, one worker
  actor per GPU (or per CPU), restarts and lost nodes;
* :mod:`.slurm` — :class:`~.slurm.SlurmExecutor`: a submitit job array whose tasks claim streams
  by their locks (no driver queue: an array task cannot call back), requeued on preemption.

See docs/distributed.md for the user's side.
"""
