//! A long scenario as named steps over one shared fixture (a cluster takes minutes to bring
//! up): a failed step is recorded and the next one still runs, so one run names every failure
//! instead of the first. The scenario fails at [`Steps::finish`] listing each failed step.
//!
//! Use it only where the steps are independent enough that running on after a failure is
//! sound: a step that needs an earlier one's result takes it from that step's return value,
//! and is skipped (reported as such) when the earlier step failed.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

/// The steps of one scenario run so far.
#[must_use = "a scenario's failures are reported by finish()"]
pub struct Steps {
    scenario: String,
    passed: Vec<String>,
    failed: Vec<(String, String)>,
    skipped: Vec<String>,
}

impl Steps {
    /// A scenario named for its report.
    pub fn new(scenario: &str) -> Self {
        Self {
            scenario: scenario.to_string(),
            passed: Vec::new(),
            failed: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Runs step `name`; a panic in it is recorded and the scenario goes on. Returns the
    /// step's value, or `None` if it failed.
    pub fn step<T>(&mut self, name: &str, body: impl FnOnce() -> T) -> Option<T> {
        eprintln!("--- step: {name}");
        let started = Instant::now();
        match catch_unwind(AssertUnwindSafe(body)) {
            Ok(value) => {
                eprintln!("--- step passed in {:.1?}: {name}", started.elapsed());
                self.passed.push(name.to_string());
                Some(value)
            }
            Err(panic) => {
                let message = panic_message(panic.as_ref());
                eprintln!(
                    "--- step FAILED in {:.1?}: {name}: {message}",
                    started.elapsed()
                );
                self.failed.push((name.to_string(), message));
                None
            }
        }
    }

    /// Runs step `name` with what an earlier step returned; without it (that step failed) the
    /// step is recorded as skipped, not run.
    pub fn step_with<A, T>(
        &mut self,
        name: &str,
        input: Option<A>,
        body: impl FnOnce(A) -> T,
    ) -> Option<T> {
        match input {
            Some(input) => self.step(name, || body(input)),
            None => {
                eprintln!("--- step skipped (an earlier step it needs failed): {name}");
                self.skipped.push(name.to_string());
                None
            }
        }
    }

    /// Panics naming every failed and skipped step, if any.
    pub fn finish(self) {
        eprintln!(
            "--- {}: {} steps passed, {} failed, {} skipped",
            self.scenario,
            self.passed.len(),
            self.failed.len(),
            self.skipped.len()
        );
        if self.failed.is_empty() && self.skipped.is_empty() {
            return;
        }
        let mut report = format!(
            "{}: {} of {} steps failed",
            self.scenario,
            self.failed.len(),
            self.passed.len() + self.failed.len() + self.skipped.len()
        );
        for (name, message) in &self.failed {
            report.push_str(&format!("\n  FAILED {name}: {message}"));
        }
        for name in &self.skipped {
            report.push_str(&format!("\n  skipped {name} (needs a failed step)"));
        }
        panic!("{report}");
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_runs_and_finish_names_each_failure() {
        let mut steps = Steps::new("scenario");
        let mut ran = Vec::new();
        let first = steps.step("first", || {
            ran.push(1);
            7
        });
        assert_eq!(first, Some(7));
        let second: Option<u32> = steps.step("second", || panic!("second broke"));
        assert_eq!(second, None);
        steps.step("third", || ran.push(3));
        let fourth = steps.step_with("fourth", second, |_| ran.push(4));
        assert_eq!(fourth, None);
        assert_eq!(ran, [1, 3], "a failed step does not stop the next");
        let report = catch_unwind(AssertUnwindSafe(|| steps.finish()))
            .expect_err("finish fails when a step failed");
        let report = panic_message(report.as_ref());
        assert!(report.contains("1 of 4 steps failed"), "{report}");
        assert!(report.contains("FAILED second: second broke"), "{report}");
        assert!(report.contains("skipped fourth"), "{report}");
        assert!(!report.contains("first"), "{report}");
    }

    #[test]
    fn finish_passes_when_every_step_passed() {
        let mut steps = Steps::new("scenario");
        steps.step("only", || ());
        steps.finish();
    }
}
