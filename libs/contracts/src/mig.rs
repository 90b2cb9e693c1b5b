//! Fractional GPUs: NVIDIA Multi-Instance GPU (MIG) slices, and the placement
//! rules every party shares (the catalog when it allocates, the host agent
//! when it creates a slice, simulated GPUs when they model one).
//!
//! A MIG-capable GPU has eight memory slices. A GPU instance of a profile
//! occupies `size` consecutive memory slices starting at one of the
//! profile's valid starts (NVIDIA's MIG user guide, "GPU instance profiles"
//! and `nvidia-smi mig -lgipp`); two instances on one GPU never share a
//! memory slice. NVIDIA's placements already keep compute slices within
//! seven, so memory placement is the whole rule. A GPU rented whole holds all
//! eight slices, which is how a whole rental and a slice never share a GPU.
//!
//! Placement is **best-fit**: of the placements that fit, the one that
//! leaves the most room for large profiles (whole empty GPUs first, then free
//! aligned blocks of 4, 2 and 1 slices), so a `7g` stays possible for as long
//! as the layout allows. [`first_fit`] is kept for comparison (the
//! fragmentation test prints both).

use serde::{Deserialize, Serialize};

use crate::ids::InstanceId;

/// Memory slices of a MIG-capable GPU.
pub const MEMORY_SLICES: u8 = 8;

/// An occupancy mask of one GPU: bit `i` set when memory slice `i` is held.
pub type Mask = u8;

/// A whole GPU's mask.
pub const WHOLE: Mask = 0xFF;

/// A MIG profile of one GPU model, as the catalog keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigProfile {
    /// e.g. `3g.40gb`.
    pub name: String,
    pub compute_slices: u8,
    pub memory_slices: u8,
    pub memory_gib: i32,
    /// Valid start memory slices, ascending.
    pub placements: Vec<u8>,
    /// The NVML GPU instance profile constant (`NVML_GPU_INSTANCE_PROFILE_*`)
    /// the agent creates it with.
    pub nvml_profile: u32,
}

impl MigProfile {
    /// GPU-equivalents in eighths: a slice counts as its share of the GPU's
    /// memory slices (docs/mig.md), so quotas stay whole numbers.
    pub fn eighths(&self) -> i32 {
        i32::from(self.memory_slices)
    }

    /// Whether `start` is one of the profile's placements.
    pub fn valid_start(&self, start: u8) -> bool {
        self.placements.contains(&start)
    }
}

/// One slice as allocated: which GPU, where on it, of which profile. Sent to
/// the agent with the provisioning command, which creates exactly it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigSlice {
    pub profile: String,
    pub gpu_index: u32,
    pub start: u8,
    pub size: u8,
    #[serde(default)]
    pub nvml_profile: u32,
}

impl MigSlice {
    pub fn mask(&self) -> Mask {
        span(self.start, self.size)
    }
}

/// How a host runs one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuMode {
    /// Rented whole only.
    #[default]
    Whole,
    /// MIG; the platform places each slice as orders arrive (best-fit).
    MigAuto,
    /// MIG with a layout the host fixed: slices go only where it says.
    MigFixed,
}

impl GpuMode {
    pub fn as_str(self) -> &'static str {
        match self {
            GpuMode::Whole => "whole",
            GpuMode::MigAuto => "mig_auto",
            GpuMode::MigFixed => "mig_fixed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "whole" => Some(GpuMode::Whole),
            "mig_auto" => Some(GpuMode::MigAuto),
            "mig_fixed" => Some(GpuMode::MigFixed),
            _ => None,
        }
    }

    pub fn is_mig(self) -> bool {
        self != GpuMode::Whole
    }
}

/// A slot of a fixed layout: a profile at a start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutSlot {
    pub profile: String,
    pub start: u8,
}

/// The mask of `size` slices from `start` (empty when out of range).
pub fn span(start: u8, size: u8) -> Mask {
    if size == 0 || u16::from(start) + u16::from(size) > u16::from(MEMORY_SLICES) {
        return 0;
    }
    (((1u16 << size) - 1) << start) as Mask
}

/// Whether `profile` fits at `start` on a GPU whose held slices are `held`.
pub fn fits(held: Mask, profile: &MigProfile, start: u8) -> bool {
    profile.valid_start(start) && {
        let want = span(start, profile.memory_slices);
        want != 0 && held & want == 0
    }
}

/// One GPU as placement sees it: its index, held slices and (for a fixed
/// layout) the starts each profile may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuSlots {
    pub index: u32,
    pub held: Mask,
    /// `None`: any valid placement (auto). `Some`: only these slots.
    pub layout: Option<Vec<LayoutSlot>>,
}

impl GpuSlots {
    fn allows(&self, profile: &MigProfile, start: u8) -> bool {
        match &self.layout {
            None => true,
            Some(slots) => slots
                .iter()
                .any(|s| s.profile == profile.name && s.start == start),
        }
    }

    /// Every start where `profile` fits now.
    pub fn free_starts(&self, profile: &MigProfile) -> Vec<u8> {
        profile
            .placements
            .iter()
            .copied()
            .filter(|&s| fits(self.held, profile, s) && self.allows(profile, s))
            .collect()
    }
}

/// How many slices of `profile` could be placed on `gpus` one after another:
/// what an offer shows as free. GPUs are independent, so it is the sum of
/// each GPU's count (linear in GPUs; it runs under the machine's lock on
/// every change). On one GPU, taking the lowest free start each time places
/// the most slices of one profile, as NVIDIA's placements are aligned.
pub fn free_count(gpus: &[GpuSlots], profile: &MigProfile) -> i32 {
    gpus.iter()
        .map(|gpu| {
            let mut gpu = gpu.clone();
            let mut n = 0;
            while let Some(&start) = gpu.free_starts(profile).first() {
                gpu.held |= span(start, profile.memory_slices);
                n += 1;
            }
            n
        })
        .sum()
}

/// Room left on a set of GPUs, largest first: empty GPUs, then free aligned
/// blocks of 4, 2 and 1 memory slices. Compared lexicographically: more is
/// better.
fn room(gpus: &[GpuSlots]) -> [u32; 4] {
    let mut r = [0u32; 4];
    for g in gpus {
        if g.held == 0 {
            r[0] += 1;
        }
        for (slot, size) in [(1, 4u8), (2, 2), (3, 1)] {
            let mut start = 0;
            while start + size <= MEMORY_SLICES {
                if g.held & span(start, size) == 0 {
                    r[slot] += 1;
                }
                start += size;
            }
        }
    }
    r
}

/// The best-fit placement of `profile` on `gpus`: `(gpu index, start)`, or
/// `None` when it fits nowhere. Ties go to the lowest index and start, so
/// the choice is deterministic.
pub fn best_fit(gpus: &[GpuSlots], profile: &MigProfile) -> Option<(u32, u8)> {
    let mut best: Option<([u32; 4], u32, u8)> = None;
    let mut trial = gpus.to_vec();
    for (pos, gpu) in gpus.iter().enumerate() {
        for start in gpu.free_starts(profile) {
            trial[pos].held = gpu.held | span(start, profile.memory_slices);
            let score = room(&trial);
            trial[pos].held = gpu.held;
            let better = match &best {
                None => true,
                Some((s, i, st)) => score > *s || (score == *s && (gpu.index, start) < (*i, *st)),
            };
            if better {
                best = Some((score, gpu.index, start));
            }
        }
    }
    best.map(|(_, i, s)| (i, s))
}

/// The first placement that fits: lowest GPU index, then lowest start.
pub fn first_fit(gpus: &[GpuSlots], profile: &MigProfile) -> Option<(u32, u8)> {
    let mut sorted: Vec<&GpuSlots> = gpus.iter().collect();
    sorted.sort_by_key(|g| g.index);
    sorted
        .into_iter()
        .find_map(|g| g.free_starts(profile).first().map(|&s| (g.index, s)))
}

/// Checks a fixed layout against the model's profiles: every slot a known
/// profile at a valid start, no two slots sharing a memory slice.
pub fn check_layout(profiles: &[MigProfile], layout: &[LayoutSlot]) -> Result<(), String> {
    let mut held: Mask = 0;
    for slot in layout {
        let Some(p) = profiles.iter().find(|p| p.name == slot.profile) else {
            return Err(format!(
                "unknown MIG profile {:?}; this model has {}",
                slot.profile,
                profiles
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        if !fits(held, p, slot.start) {
            return Err(if p.valid_start(slot.start) {
                format!(
                    "{} at slice {} overlaps another slot of the layout",
                    p.name, slot.start
                )
            } else {
                format!(
                    "{} cannot start at memory slice {}; valid starts: {:?}",
                    p.name, slot.start, p.placements
                )
            });
        }
        held |= span(slot.start, p.memory_slices);
    }
    Ok(())
}

/// Longest profile name accepted from a client (`7g.141gb` is 8).
pub const MAX_PROFILE_NAME: usize = 32;

/// A client's profile name, checked before it reaches SQL or a message:
/// `field: why` when refused.
pub fn check_profile_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > MAX_PROFILE_NAME
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '.')
    {
        return Err(format!(
            "migProfile: a profile name such as 3g.40gb (at most {MAX_PROFILE_NAME} letters, digits and dots)"
        ));
    }
    Ok(())
}

/// What a slice order must be, wherever it is checked (ordering when it is
/// recorded, the catalog when it allocates): a valid name, one slice, on
/// demand. `field: why` when refused.
pub fn check_slice_order(
    profile: &str,
    gpu_count: i32,
    rental_type: crate::states::RentalType,
) -> Result<(), String> {
    check_profile_name(profile)?;
    if gpu_count != 1 {
        return Err("gpuCount: a MIG slice order is for one slice (gpuCount 1)".into());
    }
    if rental_type != crate::states::RentalType::OnDemand {
        return Err("rentalType: MIG slices are rented on demand only".into());
    }
    Ok(())
}

/// A slice in use on a GPU, as the host portal shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldSlice {
    pub profile: String,
    pub start: u8,
    pub size: u8,
    pub instance_id: Option<InstanceId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> Vec<MigProfile> {
        let p = |name: &str, c: u8, m: u8, gib: i32, starts: &[u8]| MigProfile {
            name: name.into(),
            compute_slices: c,
            memory_slices: m,
            memory_gib: gib,
            placements: starts.to_vec(),
            nvml_profile: 0,
        };
        vec![
            p("1g.10gb", 1, 1, 10, &[0, 1, 2, 3, 4, 5, 6]),
            p("1g.20gb", 1, 2, 20, &[0, 2, 4, 6]),
            p("2g.20gb", 2, 2, 20, &[0, 2, 4]),
            p("3g.40gb", 3, 4, 40, &[0, 4]),
            p("4g.40gb", 4, 4, 40, &[0]),
            p("7g.80gb", 7, 8, 80, &[0]),
        ]
    }

    fn gpu(index: u32, held: Mask) -> GpuSlots {
        GpuSlots {
            index,
            held,
            layout: None,
        }
    }

    #[test]
    fn spans_and_fits() {
        assert_eq!(span(0, 8), 0xFF);
        assert_eq!(span(4, 4), 0xF0);
        assert_eq!(span(6, 4), 0, "past the last slice");
        let p = h100();
        assert!(fits(0, &p[0], 6));
        assert!(!fits(0, &p[0], 7), "1g never starts at slice 7");
        assert!(!fits(0b0001_0000, &p[3], 4));
        assert!(!fits(0, &p[2], 6), "2g never starts at 6");
    }

    #[test]
    fn best_fit_keeps_the_empty_gpu_and_the_large_block() {
        let p = h100();
        // A 1g goes to the GPU already in use, beside the slice there, not
        // on the empty GPU and not in the middle of the free half.
        let gpus = [gpu(0, 0), gpu(1, 0b0000_0001)];
        assert_eq!(best_fit(&gpus, &p[0]), Some((1, 1)));
        assert_eq!(first_fit(&gpus, &p[0]), Some((0, 0)));
        // A full GPU takes nothing; a whole-held GPU takes nothing.
        assert_eq!(best_fit(&[gpu(0, WHOLE)], &p[0]), None);
        assert_eq!(free_count(&[gpu(0, 0)], &p[0]), 7);
        assert_eq!(free_count(&[gpu(0, 0)], &p[3]), 2);
        assert_eq!(free_count(&[gpu(0, 0), gpu(1, 0x0F)], &p[5]), 1);
    }

    #[test]
    fn fixed_layouts_restrict_and_are_checked() {
        let p = h100();
        let layout = vec![
            LayoutSlot {
                profile: "3g.40gb".into(),
                start: 0,
            },
            LayoutSlot {
                profile: "1g.10gb".into(),
                start: 4,
            },
        ];
        assert!(check_layout(&p, &layout).is_ok());
        let g = GpuSlots {
            index: 0,
            held: 0,
            layout: Some(layout),
        };
        assert_eq!(g.free_starts(&p[0]), vec![4]);
        assert_eq!(g.free_starts(&p[5]), Vec::<u8>::new());
        let overlap = vec![
            LayoutSlot {
                profile: "4g.40gb".into(),
                start: 0,
            },
            LayoutSlot {
                profile: "2g.20gb".into(),
                start: 2,
            },
        ];
        assert!(check_layout(&p, &overlap).unwrap_err().contains("overlaps"));
        let bad_start = vec![LayoutSlot {
            profile: "4g.40gb".into(),
            start: 4,
        }];
        assert!(
            check_layout(&p, &bad_start)
                .unwrap_err()
                .contains("valid starts")
        );
    }

    /// A tiny deterministic generator, so the sequences are the same on
    /// every machine without a dependency.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    /// One policy run over a seeded sequence of arrivals and departures on
    /// `gpus` MIG GPUs: (steps where a `7g` could still be placed, orders
    /// refused).
    type Policy = fn(&[GpuSlots], &MigProfile) -> Option<(u32, u8)>;

    fn run(policy: Policy, seed: u64, gpus: u32) -> (u32, u32) {
        let p = h100();
        let mut rng = Lcg(seed);
        let mut state: Vec<GpuSlots> = (0..gpus).map(|i| gpu(i, 0)).collect();
        let mut live: Vec<(u32, Mask)> = Vec::new();
        let (mut seven, mut refused) = (0, 0);
        for _ in 0..400 {
            if !live.is_empty() && rng.next(100) < 45 {
                let (i, m) = live.swap_remove(rng.next(live.len() as u64) as usize);
                state[i as usize].held &= !m;
            } else {
                // Mostly small slices, as a market would see.
                let profile = &p[[0, 0, 0, 1, 1, 2, 3, 3][rng.next(8) as usize]];
                match policy(&state, profile) {
                    Some((i, start)) => {
                        let m = span(start, profile.memory_slices);
                        assert_eq!(state[i as usize].held & m, 0, "overlap");
                        state[i as usize].held |= m;
                        live.push((i, m));
                    }
                    None => refused += 1,
                }
            }
            if best_fit(&state, &p[5]).is_some() {
                seven += 1;
            }
        }
        (seven, refused)
    }

    /// Best-fit keeps a `7g` possible at least as often as first-fit over
    /// seeded sequences of orders and releases, and refuses no more orders
    /// (printed side by side: `cargo test -p gpumarket-contracts mig -- --nocapture`).
    #[test]
    fn best_fit_fragments_less_than_first_fit() {
        let (mut best_total, mut first_total) = ((0, 0), (0, 0));
        for seed in 1..=20u64 {
            let best = run(best_fit, seed, 2);
            let first = run(first_fit, seed, 2);
            println!(
                "seed {seed:>2}: steps with a 7g placeable best-fit {:>3} first-fit {:>3}; refused best-fit {:>3} first-fit {:>3}",
                best.0, first.0, best.1, first.1
            );
            best_total = (best_total.0 + best.0, best_total.1 + best.1);
            first_total = (first_total.0 + first.0, first_total.1 + first.1);
        }
        println!(
            "total: 7g placeable best-fit {} first-fit {}; refused best-fit {} first-fit {}",
            best_total.0, first_total.0, best_total.1, first_total.1
        );
        assert!(
            best_total.0 >= first_total.0,
            "best-fit keeps 7g possible less often"
        );
        assert!(
            best_total.1 <= first_total.1,
            "best-fit refuses more orders"
        );
    }

    /// Whatever the order of arrivals, placement never overlaps, never uses
    /// an invalid start, and finds a place whenever one exists.
    #[test]
    fn best_fit_places_whenever_any_placement_exists() {
        let p = h100();
        for seed in 0..200u64 {
            let mut rng = Lcg(seed);
            let mut state = vec![gpu(0, 0), gpu(1, 0)];
            for _ in 0..30 {
                let profile = &p[rng.next(p.len() as u64) as usize];
                let any = state.iter().any(|g| !g.free_starts(profile).is_empty());
                match best_fit(&state, profile) {
                    Some((i, start)) => {
                        assert!(profile.valid_start(start));
                        let m = span(start, profile.memory_slices);
                        assert_eq!(state[i as usize].held & m, 0);
                        state[i as usize].held |= m;
                    }
                    None => assert!(!any, "seed {seed}: a placement existed"),
                }
            }
        }
    }
}
