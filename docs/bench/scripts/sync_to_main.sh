#!/bin/sh
# Copy this worktree (without .git, .venv, .assets) to /work/main/.dev_speed, the folder the device tool carries.
rm -rf /work/main/.dev_speed && mkdir -p /work/main/.dev_speed
cd "$(dirname "$0")/../../.." && tar --exclude=./.git --exclude=./.venv --exclude=./.assets --exclude=__pycache__ -cf - . | tar -xf - -C /work/main/.dev_speed
