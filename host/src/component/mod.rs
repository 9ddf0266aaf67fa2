//! The component plumbing: the generated bindings, the conversions between them and the public
//! types, the compiled engine and its instances, the compiled-code cache, and the sandbox linker
//! that grants the component its imports and nothing else.

pub mod bindings;
pub mod cache;
pub mod convert;
pub(crate) mod digest_file;
pub mod engine;
pub mod instance;
pub mod sandbox;
