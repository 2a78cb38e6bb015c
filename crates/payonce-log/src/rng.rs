//! A tiny deterministic generator for simulated crashes: the same seed gives
//! the same crash on every machine.

/// splitmix64 (Steele, Lea, Flood 2014): one u64 of state, full period.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..=max`, with negligible bias for the small ranges used here.
    pub(crate) fn up_to(&mut self, max: usize) -> usize {
        let span = (max as u64).wrapping_add(1);
        if span == 0 {
            return self.next_u64() as usize;
        }
        (self.next_u64() % span) as usize
    }

    pub(crate) fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
}
