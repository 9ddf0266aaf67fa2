//! How hard a SQLite commit is made durable (a store's option).

/// How hard a commit is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// `synchronous=FULL` (the default): a committed answer survives a power loss.
    #[default]
    Full,
    /// `synchronous=NORMAL`: a committed answer survives a crash of the process, but the last
    /// commits may be lost on power loss. Faster.
    Normal,
}

impl Synchronous {
    pub(crate) fn pragma(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Normal => "NORMAL",
        }
    }
}
