"""Recovery: what keeps every document of a run accounted for when workers die, pause or lose
their broker. The leases a process's threads work under (`leases`), the heartbeat that renews them
and takes back the documents of dead owners (`heartbeat`, with the step lease that guards a run's
report steps), and the deliveries each worker received but has not finished (`deliveries`).

It sits beside `pipeline.ingest`, above storage (whose rows it moves) and below extraction (whose
threads hold its leases).
"""
