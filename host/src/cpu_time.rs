//! The calling thread's CPU time: the guest's CPU budget is measured in it, so a thread that the
//! OS does not schedule (a loaded machine) never counts against the guest.

use std::time::Duration;

/// A point in the current thread's CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ThreadCpuTime(Duration);

impl ThreadCpuTime {
    /// The CPU time the current thread has used so far.
    pub fn now() -> Self {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID is always
        // available on Linux. On failure `ts` stays zero, which only makes the budget lenient.
        unsafe {
            libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
        }
        Self(Duration::new(
            ts.tv_sec.max(0) as u64,
            ts.tv_nsec.clamp(0, 999_999_999) as u32,
        ))
    }

    /// CPU time the current thread used since `self` (zero if measured on another thread that
    /// had used more).
    pub fn elapsed(&self) -> Duration {
        Self::now().0.saturating_sub(self.0)
    }
}
