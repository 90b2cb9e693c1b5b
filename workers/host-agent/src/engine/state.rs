//! What the executor keeps in its state directory so a restarted agent
//! knows it: each instance's GPU binding (`bindings/<instance>`, the
//! indices `0,1`) and the "wanted running" markers (`wanted/<instance>`,
//! holding the run number) that make a container's exit worth reporting.
//! Files are written whole (temp file + rename), so a SIGKILL leaves the old
//! or the new content, never half.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::EngineError;

pub struct StateDir {
    bindings: PathBuf,
    wanted: PathBuf,
}

impl StateDir {
    pub fn open(root: &Path) -> Result<StateDir, EngineError> {
        let state = StateDir {
            bindings: root.join("bindings"),
            wanted: root.join("wanted"),
        };
        for dir in [&state.bindings, &state.wanted] {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        Ok(state)
    }

    /// Every instance's GPU indices.
    pub fn bindings(&self) -> Result<BTreeMap<Uuid, Vec<u32>>, EngineError> {
        let mut all = BTreeMap::new();
        for (instance, text) in read_all(&self.bindings)? {
            all.insert(instance, parse_indices(&text));
        }
        Ok(all)
    }

    pub fn binding(&self, instance: Uuid) -> Result<Option<Vec<u32>>, EngineError> {
        Ok(read(&self.bindings.join(instance.to_string()))?.map(|t| parse_indices(&t)))
    }

    pub fn bind(&self, instance: Uuid, indices: &[u32]) -> Result<(), EngineError> {
        write(
            &self.bindings.join(instance.to_string()),
            &join_indices(indices),
        )
    }

    pub fn unbind(&self, instance: Uuid) -> Result<(), EngineError> {
        remove(&self.bindings.join(instance.to_string()))
    }

    /// The run the platform wants running for each marked instance.
    pub fn wanted(&self) -> Result<BTreeMap<Uuid, i32>, EngineError> {
        let mut all = BTreeMap::new();
        for (instance, text) in read_all(&self.wanted)? {
            all.insert(instance, text.trim().parse().unwrap_or(0));
        }
        Ok(all)
    }

    pub fn is_wanted(&self, instance: Uuid) -> bool {
        self.wanted.join(instance.to_string()).exists()
    }

    pub fn want_running(&self, instance: Uuid, run: i32) -> Result<(), EngineError> {
        write(&self.wanted.join(instance.to_string()), &run.to_string())
    }

    pub fn not_wanted(&self, instance: Uuid) -> Result<(), EngineError> {
        remove(&self.wanted.join(instance.to_string()))
    }
}

/// `0,1`.
pub fn join_indices(indices: &[u32]) -> String {
    indices
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `0,1` → [0, 1]; junk entries are skipped.
pub fn parse_indices(text: &str) -> Vec<u32> {
    text.trim()
        .split(',')
        .filter_map(|i| i.trim().parse().ok())
        .collect()
}

fn io(path: &Path, source: std::io::Error) -> EngineError {
    EngineError::State {
        path: path.to_owned(),
        source,
    }
}

fn read(path: &Path) -> Result<Option<String>, EngineError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path, e)),
    }
}

fn read_all(dir: &Path) -> Result<Vec<(Uuid, String)>, EngineError> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))?.flatten() {
        let path = entry.path();
        // Leftover temp files of a write cut short have a suffix: skipped.
        let Some(instance) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| Uuid::parse_str(n).ok())
        else {
            continue;
        };
        if let Some(text) = read(&path)? {
            all.push((instance, text));
        }
    }
    Ok(all)
}

fn write(path: &Path, text: &str) -> Result<(), EngineError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io(path, e))
}

fn remove(path: &Path) -> Result<(), EngineError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(path, e)),
    }
}
