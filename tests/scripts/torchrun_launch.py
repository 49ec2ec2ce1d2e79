"""tests/scripts/torchrun_launch.py: torchrun's own engine -- torch's elastic
agent (torch.distributed.launcher.api.elastic_launch, what `torchrun
--standalone --nproc_per_node N --no-python PROGRAM ARGS` runs) -- started
from Python, because Debian's torch 1.13 `torchrun` command fails on Python
3.11 before it starts a process (its --redirects default is read as None).

    python3 torchrun_launch.py NPROC PROGRAM [ARGS...]
"""
import sys
import uuid

from torch.distributed.elastic.multiprocessing import Std
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

nproc, program, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=str(uuid.uuid4()),
                      rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0,
                      monitor_interval=0.2, redirects=Std.NONE, tee=Std.NONE, start_method="spawn")
elastic_launch(config, program)(*args)
