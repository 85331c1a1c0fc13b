"""The simulated machines while a job runs: scheduler, processes, system calls, torch.distributed."""
