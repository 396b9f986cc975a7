//! Children of the suite that start children of their own (chromedriver and its Chromium, the
//! OpenClaw gateway under Node.js) run in a process group of their own, so that ending a test,
//! even by a panic, kills everything it started at once: killing only the direct child would
//! leave its children running, with init as their parent.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

/// A child leading a process group of its own; the whole group is killed (SIGKILL) when this is
/// dropped, after whatever gentler ending its owner's `Drop` tried first.
pub(crate) struct Group(Child);

/// One process of a group, as `/proc` shows it.
pub(crate) struct Member {
    pub pid: u32,
    /// The executable's name as the kernel keeps it (`comm`, at most 15 bytes).
    pub name: String,
}

impl Group {
    /// Spawns `command` as the leader of a new process group.
    pub(crate) fn spawn(command: &mut Command) -> std::io::Result<Group> {
        command.process_group(0).spawn().map(Group)
    }

    /// The leader, which is also the group's id.
    pub(crate) fn leader(&mut self) -> &mut Child {
        &mut self.0
    }

    pub(crate) fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

/// The processes of group `id` that still run. Zombies are left out: they hold no memory and
/// wait only for their parent (init, for a killed leader's children) to reap them.
pub(crate) fn living_in_group(id: u32) -> Vec<Member> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid pgrp ...`, where comm may hold spaces and parentheses.
            let (head, tail) = stat.rsplit_once(") ")?;
            let name = head.split_once(" (")?.1.to_string();
            let mut fields = tail.split(' ');
            let state = fields.next()?;
            let pgrp: u32 = fields.nth(1)?.parse().ok()?;
            (pgrp == id && state != "Z").then_some(Member { pid, name })
        })
        .collect()
}

/// `pid name` of each of `members`, for a failing assertion.
pub(crate) fn list(members: &[Member]) -> String {
    let shown: Vec<String> = members
        .iter()
        .map(|m| format!("{} {}", m.pid, m.name))
        .collect();
    shown.join(", ")
}

/// SIGKILL to every process whose environment sets `name` to `value`: the way to find the
/// descendants of a child that left its process group.
pub(crate) fn kill_marked(name: &str, value: &OsStr) {
    let mut wanted = name.as_bytes().to_vec();
    wanted.push(b'=');
    wanted.extend_from_slice(value.as_bytes());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    let pids = entries.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok());
    for pid in pids {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if environ
            .split(|b| *b == 0)
            .any(|var| var == wanted.as_slice())
        {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Has `command`'s process killed (SIGKILL) when the thread that spawns it ends: when the test
/// process is killed, no `Drop` runs, and a server it started would run on with init as its
/// parent. Only for a child that leaves no children of its own (`hookgate`, `nats-server`): a
/// killed chromedriver, for one, leaves its browser running.
pub(crate) fn dies_with_its_test(command: &mut Command) -> &mut Command {
    // SAFETY: between fork and exec the closure calls prctl(2) only, which is async-signal-safe,
    // and allocates nothing.
    unsafe {
        command.pre_exec(
            || match libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            },
        )
    }
}
