"""startup_job.py: twin of startup_job.lua (join, barrier, leave, with
gloo); bench/startup.sh times its whole launch under torchrun."""
import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
