import os, sys, time, torch, torch.multiprocessing as mp
def run(rank, n):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29511")
    dist.init_process_group("nccl", rank=rank, world_size=n)
    torch.cuda.set_device(rank)
    x = torch.ones(64 << 20, device="cuda")  # 256 MiB of fp32, as the probe's
    for _ in range(5): dist.all_reduce(x)
    torch.cuda.synchronize(); t = time.perf_counter(); k = 40
    for _ in range(k): dist.all_reduce(x)
    torch.cuda.synchronize(); s = (time.perf_counter() - t) / k
    if rank == 0:
        print(f"torch {torch.__version__} NCCL {torch.cuda.nccl.version()}: {n} GPUs, busbw {256*2**20/s*2*(n-1)/n/1e9:.1f} GB/s")
    dist.destroy_process_group()
if __name__ == "__main__":
    n = int(sys.argv[1]); mp.spawn(run, args=(n,), nprocs=n)
