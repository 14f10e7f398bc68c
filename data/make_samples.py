#!/usr/bin/python3
"""Writes the sample checkpoints shipped in data/ with real torch.save (torch 1.13, Debian's
python3-torch). Run: /usr/bin/python3 data/make_samples.py data/"""
import argparse
import collections
import os
import sys

import torch
import torch.nn as nn


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(dim=(2, 3)))


def main(out):
    torch.manual_seed(0)
    model = SmallNet()
    ddp_sd = collections.OrderedDict(("module." + k, v) for k, v in model.state_dict().items())
    ddp_sd._metadata = collections.OrderedDict(
        ("module." + k if k else "module", v) for k, v in model.state_dict()._metadata.items())
    torch.save(ddp_sd, os.path.join(out, "resnet_ddp.pth"))

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10)
    loss = model(torch.randn(4, 3, 8, 8)).sum()
    loss.backward()
    opt.step()
    sched.step()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "lr_scheduler": sched.state_dict(), "epoch": 3,
                "args": argparse.Namespace(lr=1e-3, epochs=10, batch_size=4, arch="smallnet")},
               os.path.join(out, "training.pth"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
