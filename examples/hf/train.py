"""A Hugging Face Trainer script of the kind a user writes: a small Llama from `transformers`, a
fixed synthetic data set, TrainingArguments from the command line. meshtest's hf-trainer adapter
adds --output_dir, --logging_steps 1, --seed, --full_determinism and, for a dp_shard mesh, FSDP 2
(docs/foreign-trainers.md); meshtest starts the ranks with torchrun's environment.

Beyond TrainingArguments, this script takes:
  --stop_at N        stop after step N (a save phase of a longer run: the LR schedule stays the
                     one of --max_steps, so a resume continues the same curve)
  --canary NAME      a bug users report, on purpose: skip_optimizer (resume without the optimizer
                     state), skip_scheduler (resume without the LR scheduler), drop_tied (a save
                     without the input embedding)
--resume_from_checkpoint may name a folder of checkpoint-<N> folders (the newest is taken).
"""
import dataclasses
import os

import torch
from transformers import (HfArgumentParser, LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback,
                          TrainingArguments, set_seed)
from transformers.trainer_utils import get_last_checkpoint


@dataclasses.dataclass
class ScriptArguments:
    stop_at: int = 0
    canary: str = "none"
    seq_len: int = 64
    samples: int = 512
    vocab: int = 256


class SyntheticText(torch.utils.data.Dataset):
    """Fixed token sequences from a seeded generator: the same data on every rank and every run."""

    def __init__(self, samples, seq_len, vocab):
        g = torch.Generator().manual_seed(1234)
        # A repeating pattern plus noise, so the loss has something to learn.
        base = torch.arange(seq_len) % 17
        noise = torch.randint(0, vocab, (samples, seq_len), generator=g)
        keep = torch.rand(samples, seq_len, generator=g) < 0.7
        self.tokens = torch.where(keep, (base + torch.arange(samples)[:, None]) % vocab, noise)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, i):
        return {"input_ids": self.tokens[i], "labels": self.tokens[i]}


class StopAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if self.step and state.global_step >= self.step:
            control.should_save = True
            control.should_training_stop = True
        return control


class CanaryTrainer(Trainer):
    """The Trainer with one of the bugs users report, when asked for."""

    canary = "none"

    def _load_optimizer_and_scheduler(self, checkpoint):
        if checkpoint is None or self.canary not in ("skip_optimizer", "skip_scheduler"):
            return super()._load_optimizer_and_scheduler(checkpoint)
        scheduler_state = self.lr_scheduler.state_dict()
        optimizer_state = self.optimizer.state_dict()
        super()._load_optimizer_and_scheduler(checkpoint)
        if self.canary == "skip_optimizer":
            self.optimizer.load_state_dict(optimizer_state)  # back to the fresh optimizer
        else:
            self.lr_scheduler.load_state_dict(scheduler_state)  # back to the fresh schedule

    def _save(self, output_dir=None, state_dict=None):
        if self.canary == "drop_tied":
            state_dict = state_dict if state_dict is not None else self.model.state_dict()
            state_dict = {k: v for k, v in state_dict.items() if k != "model.embed_tokens.weight"}
        return super()._save(output_dir, state_dict)


def main():
    args, script = HfArgumentParser((TrainingArguments, ScriptArguments)).parse_args_into_dataclasses()
    set_seed(args.seed)
    config = LlamaConfig(vocab_size=script.vocab, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=script.seq_len,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    resume = args.resume_from_checkpoint
    if resume and os.path.isdir(resume) and get_last_checkpoint(resume):  # a folder of checkpoint-<N>
        resume = get_last_checkpoint(resume)
    CanaryTrainer.canary = script.canary
    trainer = CanaryTrainer(model=model, args=args,
                            train_dataset=SyntheticText(script.samples, script.seq_len, script.vocab),
                            callbacks=[StopAt(script.stop_at)])
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_state()


if __name__ == "__main__":
    main()
