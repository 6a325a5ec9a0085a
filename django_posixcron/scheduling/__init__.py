"""The scheduler, one concern per module; `loop.Scheduler` wires them together.

rules (pure), claim, outcomes, execution (runs in flight), liveness (heartbeat, lost runs),
maintenance (pruning), shutdown (signals, the forced exit), loop (tick, run, back-off).
"""
