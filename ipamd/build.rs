//! Links ipamd's functions in the order of `hot-code.order` (scripts/hot-code.sh writes it): the
//! code a working node runs first, then what only its start runs, then the rest. The kernel maps
//! an executable's pages in blocks of 64 KiB and more as they are first run, so code spread over
//! the binary makes most of it resident; packed together it costs only its own size
//! (docs/reports/memory-profile.md).
//!
//! Only where the linker is lld, which reads a symbol ordering file: rustc links
//! x86_64-unknown-linux-gnu with it. Elsewhere ipamd links in the default order, and works the
//! same. Names the file lists that the binary lacks (a dependency updated since it was written)
//! are skipped without a warning; scripts/bench.sh says how many still match.

use std::env;
use std::path::PathBuf;

fn main() {
    // Read when the script runs, not when it was compiled: one target directory serves several
    // checkouts (CI's clone, the work tree), and cargo reuses a compiled build script across them.
    let dir = env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default();
    let order = PathBuf::from(dir).join("hot-code.order");
    println!("cargo:rerun-if-changed={}", order.display());
    let target = env::var("TARGET").unwrap_or_default();
    if target != "x86_64-unknown-linux-gnu" {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin=ipamd=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo:rustc-link-arg-bin=ipamd=-Wl,--no-warn-symbol-ordering");
}
