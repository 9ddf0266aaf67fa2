//! Deliberately broken rules, for the mutation check (`tests/all/mutations.rs`).
//!
//! Each cargo feature `mutate-<rule>` builds a component with exactly that rule broken, so the
//! check can show that the tests named for the rule fail without it. Only the host's test
//! feature `mutations` builds these components; without the features every [`broken`] is a
//! constant `false` and the checks compile away.

/// A rule the mutation check breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The same idempotency key with another answer is a conflict (broken: it is taken as a
    /// repeat).
    IdempotencyConflict,
    /// Only the current, live lease holder may write (broken: any lease is accepted).
    LeaseFencing,
    /// A round that ended cannot change (broken: ended rounds are treated as open).
    TerminalRefusal,
    /// A request the server stops waiting for fails its round `request_withdrawn` at once
    /// (broken: the withdrawal is ignored).
    WithdrawnClosure,
}

/// Whether this component was built with `rule` broken.
pub const fn broken(rule: Rule) -> bool {
    match rule {
        Rule::IdempotencyConflict => cfg!(feature = "mutate-idempotency-conflict"),
        Rule::LeaseFencing => cfg!(feature = "mutate-lease-fencing"),
        Rule::TerminalRefusal => cfg!(feature = "mutate-terminal-refusal"),
        Rule::WithdrawnClosure => cfg!(feature = "mutate-withdrawn-closure"),
    }
}
