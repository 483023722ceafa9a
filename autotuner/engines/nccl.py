"""NCCL's environment variables that a search space may set, for every engine that talks NCCL.

Names and values are NCCL's own (the "Environment Variables" page of NCCL's documentation, 2.2x): on a
PCIe box without NVLink the peer-to-peer path, the protocol, the algorithm and the channel count decide
how fast tensor-parallel all-reduces and expert-parallel all-to-alls run. Values NCCL reads as free text
(a protocol list such as "LL,Simple" or an exclusion "^LL128") are not restricted here.

Pure data: the adapters publish it in their `env_params` allow-list.
"""

from __future__ import annotations

from autotuner.engines._base import Flag

NCCL_ENV_PARAMS: dict[str, Flag] = {
    "NCCL_P2P_LEVEL": Flag(env="NCCL_P2P_LEVEL", choices=("LOC", "NVL", "PIX", "PXB", "PHB", "SYS"),
                           help="the farthest GPU pair that still talks peer-to-peer (PIX: same PCIe switch, "
                                "PHB: same CPU, SYS: across NUMA nodes)"),
    "NCCL_P2P_DISABLE": Flag(env="NCCL_P2P_DISABLE", choices=(0, 1), help="1: no peer-to-peer, through host memory"),
    "NCCL_SHM_DISABLE": Flag(env="NCCL_SHM_DISABLE", choices=(0, 1), help="1: no shared-memory transport"),
    "NCCL_PROTO": Flag(env="NCCL_PROTO", help="protocols NCCL may use: LL, LL128, Simple (a list, or ^ to exclude)"),
    "NCCL_ALGO": Flag(env="NCCL_ALGO", help="algorithms NCCL may use: Ring, Tree, ... (a list, or ^ to exclude)"),
    "NCCL_MIN_NCHANNELS": Flag(env="NCCL_MIN_NCHANNELS", help="fewest channels (more: more SMs on communication)"),
    "NCCL_MAX_NCHANNELS": Flag(env="NCCL_MAX_NCHANNELS", help="most channels"),
    "NCCL_BUFFSIZE": Flag(env="NCCL_BUFFSIZE", help="bytes of each channel's buffer (default 4 MiB)"),
    "NCCL_NTHREADS": Flag(env="NCCL_NTHREADS", choices=(64, 128, 256, 512), help="CUDA threads per NCCL block"),
}
