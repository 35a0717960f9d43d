//! No code: this crate only names dependency features (see its Cargo.toml).
