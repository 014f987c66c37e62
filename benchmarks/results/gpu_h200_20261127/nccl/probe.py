import datetime, sys, torch, torch.distributed as dist
cuda = sys.argv[1] == "cuda"
if cuda:
    torch.cuda.set_device(0)
dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=40))
rank, size = dist.get_rank(), dist.get_world_size()
out = [None] * size
dist.all_gather_object(out, {"rank": rank})
t = torch.full((1,), float(rank), device="cuda" if cuda else "cpu")
dist.all_reduce(t)
print(f"rank {rank}/{size}: all_gather_object {out}, all_reduce sum {t.item()}", flush=True)
dist.destroy_process_group()
