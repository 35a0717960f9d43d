//! ipamd itself: up and ready, how its last start went, its last errors.

use super::super::{Facts, Finding, Group, Severity};

const G: Group = Group::Ipamd;

fn up(facts: &Facts) -> Finding {
    let socket = facts.ipamd.socket.display();
    match &facts.ipamd.status {
        Ok(s) if s.ready => Finding::new(
            "ipamd",
            G,
            Severity::Ok,
            format!(
                "ipamd serves on {socket} and is ready: {} addresses, {} assigned, {} cooling, {} available",
                s.pool.total, s.pool.assigned, s.pool.cooling, s.pool.available
            ),
        ),
        Ok(s) => Finding::new(
            "ipamd",
            G,
            Severity::Error,
            format!(
                "ipamd answers on {socket} but is not ready: {}",
                s.reason.as_deref().unwrap_or("no reason given")
            ),
        )
        .fix("new pods wait until it is: the reason names what it waits for (EC2, a full subnet, the ENIConfig); see the other findings"),
        Err(e) => Finding::new(
            "ipamd",
            G,
            Severity::Error,
            format!("ipamd does not answer on {socket}: {e}. Every pod ADD on this node fails"),
        )
        .fix("check the aws-node pod on this node (`kubectl -n kube-system get pods -o wide`, its logs and events); the log's last errors are below"),
    }
}

fn log(facts: &Facts) -> Option<Finding> {
    let log = match facts.log.as_ref()? {
        Ok(log) => log,
        Err(e) => {
            return Some(Finding::new(
                "ipamd-log",
                G,
                Severity::Info,
                format!("could not read ipamd's log: {e}"),
            ));
        }
    };
    let stages = if log.stages.is_empty() {
        "no start recorded".to_string()
    } else {
        log.stages.join(" → ")
    };
    // An error of the last hour is news; older ones are history.
    let recent: Vec<&str> = log
        .errors
        .iter()
        .filter(|(_, age)| age.is_none_or(|a| a < 3600))
        .map(|(line, _)| line.as_str())
        .collect();
    Some(if recent.is_empty() {
        Finding::new(
            "ipamd-log",
            G,
            if log.errors.is_empty() {
                Severity::Ok
            } else {
                Severity::Info
            },
            format!(
                "{}: last start: {stages}; {}",
                log.path.display(),
                if log.errors.is_empty() {
                    "no errors".to_string()
                } else {
                    format!("{} error(s) older than an hour", log.errors.len())
                }
            ),
        )
    } else {
        Finding::new(
            "ipamd-log",
            G,
            Severity::Warning,
            format!(
                "{}: last start: {stages}; errors of the last hour: {}",
                log.path.display(),
                recent.join(" | ")
            ),
        )
        .fix("the errors name the failing call or setting; the other findings say whether it still matters")
    })
}

pub(super) fn check(facts: &Facts) -> Vec<Finding> {
    let mut out = vec![up(facts)];
    out.extend(log(facts));
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixture::healthy;
    use super::*;

    #[test]
    fn ipamd_down_or_not_ready_is_an_error() {
        let mut f = healthy();
        assert_eq!(check(&f)[0].severity, Severity::Ok);
        f.ipamd.status = Err("connection refused".into());
        let x = &check(&f)[0];
        assert_eq!((x.check, x.severity), ("ipamd", Severity::Error));
        assert!(x.evidence.contains("connection refused") && x.fix.is_some());
    }

    #[test]
    fn recent_errors_in_the_log_are_a_warning_old_ones_info() {
        let mut f = healthy();
        let log = f.log.as_mut().unwrap().as_mut().unwrap();
        log.errors = vec![("EC2 refused".into(), Some(10))];
        let x = check(&f)
            .into_iter()
            .find(|x| x.check == "ipamd-log")
            .unwrap();
        assert_eq!(x.severity, Severity::Warning);
        assert!(x.evidence.contains("EC2 refused"));
        let log = f.log.as_mut().unwrap().as_mut().unwrap();
        log.errors = vec![("EC2 refused".into(), Some(7200))];
        let x = check(&f)
            .into_iter()
            .find(|x| x.check == "ipamd-log")
            .unwrap();
        assert_eq!(x.severity, Severity::Info);
    }
}
