// What a stop does to a training rank. SIGTERM (the agent's stop, a scheduler's
// preemption) and SIGINT (Ctrl-C) end the process by that signal at once, as their
// default would, except while rank 0 has a checkpoint in flight (being written, or
// waiting to be): then the checkpoint is finished first, training goes no further than
// the step it is in, and the process ends by the same signal once the checkpoint is on
// the disk. A second stop, a second or more after the first, ends it at once (one
// sooner is the same stop delivered twice: by the agent and a scheduler). The agent allows a stopped rank the job's
// stop grace (job.stop_grace_s, 30 s by default; planner/formats/stop_grace.h) before SIGKILL; a write cut short by it
// leaves `latest` on the checkpoint before, as every write is atomic.
#pragma once

namespace poplar {

// Installs the handlers of SIGTERM and SIGINT; one ignored when the process started
// (SIGINT under `nohup` or `&`) stays ignored.
void InstallStopHandlers();

// Whether a checkpoint is in flight (CheckpointWriter keeps it true while one is being
// written or waits). Set to false after a stop came, it ends the process by that signal.
void SetCheckpointInFlight(bool in_flight);

// The stop signal received and not yet acted on (a checkpoint was in flight), or 0.
int StopRequested();

// Ends the process by the stop signal received (StopRequested() must not be 0): by the
// signal itself, as its default action, so that a parent sees "killed by SIGTERM".
[[noreturn]] void EndByStopSignal();

}  // namespace poplar
