"""The local scheduler: runs a plan on this machine, in-process or as a child process."""
