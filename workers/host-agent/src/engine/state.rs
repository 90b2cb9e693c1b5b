//! What the executor keeps in its state directory so a restarted agent
//! knows it: each instance's GPU binding (`bindings/<instance>`, the
//! indices `0,1`), its MIG slice (`slices/<instance>`, a
//! [`SliceRecord`] as one line of JSON) and the "wanted running" markers
//! (`wanted/<instance>`, holding the run number) that make a container's
//! exit worth reporting.
//! Each also holds, on its second line, when the platform issued the
//! command that made it ([`Made`]): a stop undoes only what was made before
//! it was decided, so a stop handled late cannot undo a start that followed.
//! Files are written whole (temp file + rename), so a SIGKILL leaves the old
//! or the new content, never half.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::EngineError;
use super::mig::SliceRecord;

/// When the platform issued the command that made a binding or marker
/// (its clock, like a stop's `issued_at`); None in files without it.
pub type Made = Option<DateTime<Utc>>;

/// `first line` and the time on the second, if any.
fn split_made(text: &str) -> (&str, Made) {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let made = lines
        .next()
        .and_then(|t| DateTime::parse_from_rfc3339(t.trim()).ok())
        .map(|t| t.with_timezone(&Utc));
    (first, made)
}

fn with_made(first: &str, made: DateTime<Utc>) -> String {
    format!("{first}\n{}\n", made.to_rfc3339())
}

pub struct StateDir {
    bindings: PathBuf,
    slices: PathBuf,
    wanted: PathBuf,
}

impl StateDir {
    pub fn open(root: &Path) -> Result<StateDir, EngineError> {
        let state = StateDir {
            bindings: root.join("bindings"),
            slices: root.join("slices"),
            wanted: root.join("wanted"),
        };
        for dir in [&state.bindings, &state.slices, &state.wanted] {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        Ok(state)
    }

    /// Every instance's GPU indices.
    pub fn bindings(&self) -> Result<BTreeMap<Uuid, Vec<u32>>, EngineError> {
        let mut all = BTreeMap::new();
        for (instance, text) in read_all(&self.bindings)? {
            all.insert(instance, parse_indices(split_made(&text).0));
        }
        Ok(all)
    }

    pub fn binding(&self, instance: Uuid) -> Result<Option<Vec<u32>>, EngineError> {
        Ok(self.binding_made(instance)?.map(|(indices, _)| indices))
    }

    /// The binding and when it was made.
    pub fn binding_made(&self, instance: Uuid) -> Result<Option<(Vec<u32>, Made)>, EngineError> {
        Ok(
            read(&self.bindings.join(instance.to_string()))?.map(|text| {
                let (first, made) = split_made(&text);
                (parse_indices(first), made)
            }),
        )
    }

    pub fn bind(
        &self,
        instance: Uuid,
        indices: &[u32],
        made: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        write(
            &self.bindings.join(instance.to_string()),
            &with_made(&join_indices(indices), made),
        )
    }

    pub fn unbind(&self, instance: Uuid) -> Result<(), EngineError> {
        remove(&self.bindings.join(instance.to_string()))
    }

    /// Every instance's MIG slice record, released ones included.
    pub fn slices(&self) -> Result<BTreeMap<Uuid, SliceRecord>, EngineError> {
        let mut all = BTreeMap::new();
        for (instance, text) in read_all(&self.slices)? {
            let path = self.slices.join(instance.to_string());
            all.insert(instance, parse_slice(&path, split_made(&text).0)?);
        }
        Ok(all)
    }

    /// The instance's slice record and when it was made.
    pub fn slice_made(&self, instance: Uuid) -> Result<Option<(SliceRecord, Made)>, EngineError> {
        let path = self.slices.join(instance.to_string());
        match read(&path)? {
            Some(text) => {
                let (first, made) = split_made(&text);
                Ok(Some((parse_slice(&path, first)?, made)))
            }
            None => Ok(None),
        }
    }

    pub fn keep_slice(
        &self,
        instance: Uuid,
        record: &SliceRecord,
        made: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let path = self.slices.join(instance.to_string());
        let json = serde_json::to_string(record)
            .map_err(|e| io(&path, std::io::Error::other(e.to_string())))?;
        write(&path, &with_made(&json, made))
    }

    pub fn drop_slice(&self, instance: Uuid) -> Result<(), EngineError> {
        remove(&self.slices.join(instance.to_string()))
    }

    /// The run the platform wants running for each marked instance.
    pub fn wanted(&self) -> Result<BTreeMap<Uuid, i32>, EngineError> {
        let mut all = BTreeMap::new();
        for (instance, text) in read_all(&self.wanted)? {
            all.insert(instance, split_made(&text).0.trim().parse().unwrap_or(0));
        }
        Ok(all)
    }

    pub fn is_wanted(&self, instance: Uuid) -> bool {
        self.wanted.join(instance.to_string()).exists()
    }

    /// When the instance was last marked wanted running, if it is.
    pub fn wanted_made(&self, instance: Uuid) -> Result<Option<Made>, EngineError> {
        Ok(read(&self.wanted.join(instance.to_string()))?.map(|text| split_made(&text).1))
    }

    pub fn want_running(
        &self,
        instance: Uuid,
        run: i32,
        made: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        write(
            &self.wanted.join(instance.to_string()),
            &with_made(&run.to_string(), made),
        )
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

/// A slice record that does not read is an error, not "no slice": taken
/// for none, its memory slices would be handed out again while in use.
fn parse_slice(path: &Path, first: &str) -> Result<SliceRecord, EngineError> {
    serde_json::from_str(first).map_err(|_| EngineError::StateUnreadable(path.to_owned()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_and_markers_keep_when_they_were_made() {
        let dir = std::env::temp_dir().join(format!("gpm-state-{}", Uuid::now_v7()));
        let state = StateDir::open(&dir).unwrap();
        let (instance, at) = (Uuid::now_v7(), Utc::now());
        state.bind(instance, &[1, 3], at).unwrap();
        state.want_running(instance, 2, at).unwrap();
        let (indices, made) = state.binding_made(instance).unwrap().unwrap();
        assert_eq!(indices, [1, 3]);
        assert_eq!(made.unwrap().timestamp_micros(), at.timestamp_micros());
        assert_eq!(state.wanted().unwrap()[&instance], 2);
        assert!(state.wanted_made(instance).unwrap().unwrap().is_some());
        assert_eq!(state.bindings().unwrap()[&instance], [1, 3]);
        // Files from before the time was kept still read.
        std::fs::write(dir.join("bindings").join(instance.to_string()), "0,1").unwrap();
        assert_eq!(
            state.binding_made(instance).unwrap(),
            Some((vec![0, 1], None))
        );
        state.unbind(instance).unwrap();
        state.not_wanted(instance).unwrap();
        assert_eq!(state.binding(instance).unwrap(), None);
        assert_eq!(state.wanted_made(instance).unwrap(), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn slices_are_kept_with_when_they_were_made_and_junk_is_an_error() {
        use crate::engine::mig::MigDevice;
        use contracts::mig::MigSlice;
        let dir = std::env::temp_dir().join(format!("gpm-state-{}", Uuid::now_v7()));
        let state = StateDir::open(&dir).unwrap();
        let (instance, at) = (Uuid::now_v7(), Utc::now());
        let record = SliceRecord {
            slice: MigSlice {
                profile: "3g.40gb".into(),
                gpu_index: 1,
                start: 4,
                size: 4,
                nvml_profile: 2,
            },
            device: MigDevice {
                gpu_instance_id: 2,
                compute_instance_id: 0,
                uuid: "MIG-5d3c4a9e-0000-8000-8000-000000000000".into(),
                device_index: 1,
            },
            released: false,
        };
        state.keep_slice(instance, &record, at).unwrap();
        let (read, made) = state.slice_made(instance).unwrap().unwrap();
        assert_eq!(read, record);
        assert_eq!(made.unwrap().timestamp_micros(), at.timestamp_micros());
        assert_eq!(state.slices().unwrap()[&instance], record);
        // A record that does not read blocks rather than frees the GPU.
        std::fs::write(dir.join("slices").join(instance.to_string()), "{").unwrap();
        assert!(matches!(
            state.slices(),
            Err(EngineError::StateUnreadable(_))
        ));
        state.drop_slice(instance).unwrap();
        assert_eq!(state.slice_made(instance).unwrap(), None);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
