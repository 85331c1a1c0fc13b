"""A rank's side of the port (port/schema.py). A rank process is built from the plain data the host
sends (main.py); its system calls, scheduler, machine and torch.distributed world are clients of
the port (client.py, dist.py, nativecalls.py). The interception (intercept/) routes a rank's Python
calls to them, or on greenlet ranks to the kernel's own objects, through the Protocols of
tasks/kernel.py; c10d/ is torch's c10d in a rank. Nothing here imports the kernel (runtime/)."""
