//! The task files behind SandboxFusion's dataset endpoints (`http.datasets`, `--http-dataset`),
//! loaded once at start-up by name.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use env_coding::tasks::TaskSet;

/// The task sets served under SandboxFusion dataset names.
#[derive(Debug, Clone, Default)]
pub struct Datasets {
    sets: BTreeMap<String, Arc<TaskSet>>,
}

/// A dataset file that failed to load (names the dataset and the file).
#[derive(Debug, thiserror::Error)]
#[error("dataset {name:?}: {error}")]
pub struct DatasetError {
    name: String,
    /// Not a `#[source]`: the message already carries it (an error chain would repeat it).
    error: env_coding::tasks::TaskError,
}

impl Datasets {
    /// Loads every `name -> task file` (blocking file IO).
    pub fn load(files: &BTreeMap<String, PathBuf>) -> Result<Datasets, DatasetError> {
        let mut sets = BTreeMap::new();
        for (name, path) in files {
            let set = TaskSet::load(path).map_err(|error| DatasetError {
                name: name.clone(),
                error,
            })?;
            sets.insert(name.clone(), Arc::new(set));
        }
        Ok(Datasets { sets })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.sets.keys().map(String::as_str)
    }

    /// The task set served as `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<TaskSet>> {
        self.sets.get(name)
    }

    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }
}
