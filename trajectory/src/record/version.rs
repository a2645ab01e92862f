//! The record layout's version: what writers stamp into every record and what readers accept.
//!
//! Every change to the record's JSON is listed in the crate's `CHANGELOG.md` (field by field), with
//! a fixture file `tests/fixtures/v<N>.jsonl` per version that the reader must keep reading
//! (`tests/fixtures.rs`). Adding an optional field does not bump the version (old readers ignore
//! unknown fields, new readers default missing ones); renaming or retyping a field does.

/// Version of the record layout written in every record's `schema_version`: see `CHANGELOG.md`.
pub const SCHEMA_VERSION: u32 = 3;

/// The oldest `schema_version` this build still reads.
pub const OLDEST_READABLE_VERSION: u32 = 1;
