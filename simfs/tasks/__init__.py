"""What both sides of the port hold of a simulated process: its threads (task.py), its state
(process.py), what its threads wait on, its console's descriptors, the entries its directory
listings yield, the process groups it names, and which of its calls are the import system's.
The kernel (runtime/) and a rank process (rank/) import these; nothing here imports either."""
