//! The process sandbox: the only module of the workspace that spawns processes.
