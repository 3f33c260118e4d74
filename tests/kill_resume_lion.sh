#!/usr/bin/env bash
# Kill-and-resume with Lion: the kill trials of tests/kill_resume.sh with the model's optimizer set to
# Lion, so its momentum goes through the checkpoints; every loss must equal the uninterrupted run's
# bitwise.
KILL_OPTIM='"lion", "lr": 0.001, "weight_decay": 0.1' KILL_TRIALS=${KILL_TRIALS:-3} exec "$(dirname "$0")/kill_resume.sh"
