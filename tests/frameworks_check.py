"""tests/it_frameworks.sh's runs: a small Lightning module under Trainer(profiler=
stagetrace.lightning.Profiler(also=SimpleProfiler())), and a small GPT-2 from a configuration (no
downloaded weights) under transformers.Trainer(callbacks=[stagetrace.transformers.Callback()]).
Prints what each recorded and checks it against the framework's own account of the same run.

    python tests/frameworks_check.py lightning|transformers OUT_DIR
"""
import os
import sys

import torch

import stagetrace


def stage_ms(path):
    df = stagetrace.read(path).to_dataframe("ranges")
    out = {}
    for name, dur in zip(df["stage_name"].astype(str), df["dur_ns"]):
        out[name] = out.get(name, 0.0) + dur / 1e6
    return out, len(df)


def lightning_run(out):
    try:
        import lightning.pytorch as pl
        from lightning.pytorch.profilers import SimpleProfiler
    except ImportError:
        import pytorch_lightning as pl
        from pytorch_lightning.profilers import SimpleProfiler
    import stagetrace.lightning

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))

        def training_step(self, batch, idx):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    data = torch.utils.data.TensorDataset(torch.randn(64 * 40, 256))
    loader = torch.utils.data.DataLoader(data, batch_size=64)
    simple = SimpleProfiler()
    prof = stagetrace.lightning.Profiler(dirpath=os.path.join(out, "lightning"), tokens_per_step=64, also=simple)
    trainer = pl.Trainer(max_steps=40, profiler=prof, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         accelerator="gpu" if torch.cuda.is_available() else "cpu", devices=1)
    trainer.fit(Module(), loader)
    path = os.path.join(out, "lightning", "fit", "rank0.sqlite")
    ms, n = stage_ms(path)
    print("lightning: %s, %d ranges" % (path, n))
    steps = stagetrace.read(path).to_dataframe("steps")
    assert len(steps) == 41 and int(steps["step"].iloc[-1]) == 40, steps
    # the same calls, timed by SimpleProfiler and by stagetrace's ranges
    compared = 0
    for name in ("training_step", "backward", "optimizer_step", "data_fetch", "training_batch"):
        same = [a for a in simple.recorded_durations if stagetrace.lightning.stage_of(a)[0] == name]
        if not same:
            continue
        theirs = 1e3 * sum(sum(simple.recorded_durations[a]) for a in same)
        ours = ms.get(name, 0.0)
        print("  %-16s stagetrace %9.3f ms, SimpleProfiler %9.3f ms (%s)" % (name, ours, theirs, ", ".join(same)))
        assert abs(ours - theirs) <= 0.05 * theirs + 1.0, (name, ours, theirs)
        compared += 1
    assert compared >= 4, simple.recorded_durations.keys()


def transformers_run(out):
    import transformers
    import stagetrace.transformers

    cfg = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=2048, n_positions=128)
    model = transformers.GPT2LMHeadModel(cfg)

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 4096

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            ids = torch.randint(0, cfg.vocab_size, (128,), generator=g)
            return {"input_ids": ids, "labels": ids}

    args = transformers.TrainingArguments(output_dir=os.path.join(out, "hf"), max_steps=30,
                                          per_device_train_batch_size=8, report_to=[], logging_steps=10,
                                          save_strategy="no", include_num_input_tokens_seen=True,
                                          disable_tqdm=True, dataloader_num_workers=0)
    cb = stagetrace.transformers.Callback()
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Data(), callbacks=[cb])
    trainer.train()
    path = os.path.join(out, "hf", "stagetrace", "rank0.sqlite")
    ms, n = stage_ms(path)
    print("transformers: %s, %d ranges: %s" % (path, n, ", ".join("%s %.1f ms" % kv for kv in sorted(ms.items()))))
    steps = stagetrace.read(path).to_dataframe("steps")
    print("  steps %d..%d, tokens %d" % (steps["step"].iloc[0], steps["step"].iloc[-1], steps["tokens"].sum()))
    assert int(steps["step"].iloc[-1]) == 30 and len(steps) == 31, steps
    assert int(steps["tokens"].sum()) == 30 * 8 * 128, steps["tokens"].sum()
    for name in ("data_fetch", "forward_backward", "optimizer", "post_step"):
        assert ms.get(name, 0) > 0, ms
    assert ms["forward_backward"] > ms["optimizer"] * 0.5, ms


if __name__ == "__main__":
    {"lightning": lightning_run, "transformers": transformers_run}[sys.argv[1]](sys.argv[2])
