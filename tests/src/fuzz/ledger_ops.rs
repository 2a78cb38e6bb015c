//! `ledger_ops`: arbitrary operation sequences on a ledger in a simulated
//! world (see [`crate::harness`]): creates; submits with succeeding,
//! failing, refusing and panicking sends; two-phase claims completed or
//! abandoned; operator resolves and releases driven by the rail's truth;
//! replayed webhooks; later rail reports and operators' corrections;
//! reopens; power losses between and inside operations
//! that drop, keep or garble unsynced bytes; injected storage faults.
//!
//! Every property is checked by the world after each step; this module only
//! turns bytes into operations, one byte per choice so that a seed input can
//! be written by hand ([`Op::encode`]).

use payonce_log::{CrashMode, Fault};
use payonce_model::WithdrawalRequest;

use crate::harness::{CrashPlan, Later, SendKind, Stats, World, WorldConfig, later, sent};

/// Request keys the operations use: few, so that retries, reuse and races
/// between keys are common.
const KEYS: &[&str] = &["k0", "k1", "k2", "phone", "laptop", "redrive", "hook"];

/// Most operations one input runs, so one input stays fast.
pub const OPS_MAX: usize = 64;

const AMOUNTS: &[&str] = &["1", "2.5", "10"];
const CURRENCIES: &[&str] = &["USDC", "BTC"];
const CRASH_MODES: [CrashMode; 4] = [
    CrashMode::DropUnsynced,
    CrashMode::KeepPrefix,
    CrashMode::Garble,
    CrashMode::Pages,
];

/// One operation, as raw choices: each field is one input byte, read
/// modulo the number of options when the operation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Mint a withdrawal.
    Create {
        /// Which amount.
        amount: u8,
        /// Which currency.
        currency: u8,
    },
    /// `submit(key, withdrawal, send)`.
    Submit {
        /// Which key.
        key: u8,
        /// Which withdrawal.
        withdrawal: u8,
        /// Which [`SendKind`].
        send: u8,
    },
    /// `record(key, withdrawal)`.
    Record {
        /// Which key.
        key: u8,
        /// Which withdrawal.
        withdrawal: u8,
    },
    /// `claim(key, withdrawal)`, kept open as a slot.
    Claim {
        /// Which key.
        key: u8,
        /// Which withdrawal.
        withdrawal: u8,
    },
    /// Call the rail for an open slot and complete it.
    Finish {
        /// Which slot.
        slot: u8,
        /// Which [`SendKind`].
        send: u8,
    },
    /// Drop an open slot's ticket, after calling the rail if `send` is not 0.
    Abandon {
        /// Which slot.
        slot: u8,
        /// 0: no call; else the [`SendKind`] of the call, plus one.
        send: u8,
    },
    /// An operator resolves or releases a key from the rail's truth.
    Operator {
        /// Which key.
        key: u8,
    },
    /// A replayed webhook resolves a withdrawal under a key.
    Webhook {
        /// Which key.
        key: u8,
        /// Which withdrawal.
        withdrawal: u8,
        /// Odd: the webhook says confirmed (or declined).
        confirmed: u8,
    },
    /// A submission of a withdrawal not minted here (`foreign` odd) or
    /// minted for other fields.
    Stranger {
        /// Which key.
        key: u8,
        /// Which withdrawal to tamper with, or which foreign id.
        withdrawal: u8,
        /// Odd: a foreign id.
        foreign: u8,
    },
    /// Close and reopen.
    Reopen,
    /// Lose power now.
    Crash {
        /// Which [`CrashMode`].
        mode: u8,
        /// What survives.
        seed: u8,
    },
    /// Lose power after `after` more storage operations.
    PlanCrash {
        /// Storage operations to let through.
        after: u8,
        /// Which [`CrashMode`].
        mode: u8,
        /// What survives.
        seed: u8,
    },
    /// Arm a storage fault.
    Fault {
        /// Which fault.
        kind: u8,
        /// Which operation it hits (1 to 3), or the space budget.
        nth: u8,
    },
    /// `sync()`.
    Sync,
    /// The rail moves a withdrawal it sent on (confirmed, failed, bumped)
    /// and reports it, to `advance(key, ..)`, unless the report is lost;
    /// or a report replayed; or, if no money moved, a report to no key.
    Report {
        /// Which key.
        key: u8,
        /// Which withdrawal.
        withdrawal: u8,
        /// Which report: see `report`.
        report: u8,
    },
    /// An operator corrects a key's outcome to the rail's truth with
    /// `correct(key, ..)`.
    Correct {
        /// Which key.
        key: u8,
        /// Which withdrawal.
        withdrawal: u8,
    },
}

/// Operation codes, in the order of [`Op`]'s variants.
const CODES: u8 = 16;

fn field(bytes: &mut &[u8]) -> u8 {
    match bytes.split_first() {
        Some((first, rest)) => {
            *bytes = rest;
            *first
        }
        None => 0,
    }
}

impl Op {
    /// Reads the next operation; `None` at the end of the input.
    pub fn decode(bytes: &mut &[u8]) -> Option<Op> {
        let (&code, rest) = bytes.split_first()?;
        *bytes = rest;
        let mut next = || field(bytes);
        Some(match code % CODES {
            0 => Op::Create {
                amount: next(),
                currency: next(),
            },
            1 => Op::Submit {
                key: next(),
                withdrawal: next(),
                send: next(),
            },
            2 => Op::Record {
                key: next(),
                withdrawal: next(),
            },
            3 => Op::Claim {
                key: next(),
                withdrawal: next(),
            },
            4 => Op::Finish {
                slot: next(),
                send: next(),
            },
            5 => Op::Abandon {
                slot: next(),
                send: next(),
            },
            6 => Op::Operator { key: next() },
            7 => Op::Webhook {
                key: next(),
                withdrawal: next(),
                confirmed: next(),
            },
            8 => Op::Stranger {
                key: next(),
                withdrawal: next(),
                foreign: next(),
            },
            9 => Op::Reopen,
            10 => Op::Crash {
                mode: next(),
                seed: next(),
            },
            11 => Op::PlanCrash {
                after: next(),
                mode: next(),
                seed: next(),
            },
            12 => Op::Fault {
                kind: next(),
                nth: next(),
            },
            13 => Op::Sync,
            14 => Op::Report {
                key: next(),
                withdrawal: next(),
                report: next(),
            },
            _ => Op::Correct {
                key: next(),
                withdrawal: next(),
            },
        })
    }

    /// The bytes [`Op::decode`] reads back as this operation.
    pub fn encode(&self) -> Vec<u8> {
        match *self {
            Op::Create { amount, currency } => vec![0, amount, currency],
            Op::Submit {
                key,
                withdrawal,
                send,
            } => vec![1, key, withdrawal, send],
            Op::Record { key, withdrawal } => vec![2, key, withdrawal],
            Op::Claim { key, withdrawal } => vec![3, key, withdrawal],
            Op::Finish { slot, send } => vec![4, slot, send],
            Op::Abandon { slot, send } => vec![5, slot, send],
            Op::Operator { key } => vec![6, key],
            Op::Webhook {
                key,
                withdrawal,
                confirmed,
            } => vec![7, key, withdrawal, confirmed],
            Op::Stranger {
                key,
                withdrawal,
                foreign,
            } => vec![8, key, withdrawal, foreign],
            Op::Reopen => vec![9],
            Op::Crash { mode, seed } => vec![10, mode, seed],
            Op::PlanCrash { after, mode, seed } => vec![11, after, mode, seed],
            Op::Fault { kind, nth } => vec![12, kind, nth],
            Op::Sync => vec![13],
            Op::Report {
                key,
                withdrawal,
                report,
            } => vec![14, key, withdrawal, report],
            Op::Correct { key, withdrawal } => vec![15, key, withdrawal],
        }
    }
}

/// The bytes of a whole input: the world's settings, then the operations.
pub fn encode(config: &WorldConfig, ops: &[Op]) -> Vec<u8> {
    let flags = u8::from(config.accept_foreign_ids)
        | (u8::from(!config.log_refusals) << 1)
        | (u8::from(config.replay_on_two_threads) << 2)
        | (u8::from(config.set_apart_settled) << 3);
    let mut bytes = vec![flags];
    for op in ops {
        bytes.extend(op.encode());
    }
    bytes
}

fn pick<T: Copy>(options: &[T], byte: u8) -> T {
    options[usize::from(byte) % options.len()]
}

fn send_kind(byte: u8) -> SendKind {
    pick(&SendKind::ALL, byte)
}

fn fault(kind: u8, nth: u8) -> Fault {
    let nth_op = u64::from(nth % 3) + 1;
    match kind % 7 {
        0 => Fault::WriteFails { nth: nth_op },
        1 => Fault::WriteShort {
            nth: nth_op,
            landed: usize::from(nth % 64),
        },
        2 => Fault::SyncFails { nth: nth_op },
        3 => Fault::DirSyncFails { nth: nth_op },
        4 => Fault::RenameFails { nth: nth_op },
        5 => Fault::CreateFails { nth: nth_op },
        _ => Fault::NoSpace {
            budget: u64::from(nth) * 16,
        },
    }
}

/// Runs `op` in `world`.
pub fn run(world: &mut World, op: Op) {
    let withdrawal = |world: &World, byte: u8| {
        let all = world.withdrawals();
        (!all.is_empty()).then(|| all[usize::from(byte) % all.len()].clone())
    };
    let slot = |world: &World, byte: u8| {
        let slots = world.slots();
        (!slots.is_empty()).then(|| slots[usize::from(byte) % slots.len()])
    };
    match op {
        Op::Create { amount, currency } => {
            world.create(pick(AMOUNTS, amount), pick(CURRENCIES, currency));
        }
        Op::Submit {
            key,
            withdrawal: w,
            send,
        } => {
            if let Some(request) = withdrawal(world, w) {
                world.submit(pick(KEYS, key), &request, send_kind(send));
            }
        }
        Op::Record { key, withdrawal: w } => {
            if let Some(request) = withdrawal(world, w) {
                world.record(pick(KEYS, key), &request);
            }
        }
        Op::Claim { key, withdrawal: w } => {
            if let Some(request) = withdrawal(world, w) {
                world.begin(pick(KEYS, key), &request);
            }
        }
        Op::Finish { slot: s, send } => {
            if let Some(s) = slot(world, s) {
                world.call_rail(s, send_kind(send));
                world.finish(s);
            }
        }
        Op::Abandon { slot: s, send } => {
            if let Some(s) = slot(world, s) {
                if send != 0 {
                    world.call_rail(s, send_kind(send - 1));
                }
                world.abandon(s);
            }
        }
        Op::Operator { key } => world.operator(pick(KEYS, key)),
        Op::Webhook {
            key,
            withdrawal: w,
            confirmed,
        } => {
            if let Some(request) = withdrawal(world, w) {
                world.webhook(pick(KEYS, key), &request, confirmed % 2 == 1);
            }
        }
        Op::Stranger {
            key,
            withdrawal: w,
            foreign,
        } => {
            let request = if foreign % 2 == 1 {
                Some(world.foreign(w % 4))
            } else {
                withdrawal(world, w).map(|request| world.tampered(&request))
            };
            if let Some(request) = request {
                world.submit(pick(KEYS, key), &request, SendKind::Succeed);
            }
        }
        Op::Reopen => world.reopen(),
        Op::Crash { mode, seed } => world.crash(pick(&CRASH_MODES, mode), u64::from(seed)),
        Op::PlanCrash { after, mode, seed } => world.plan_crash(CrashPlan {
            after: u64::from(after % 32),
            mode: pick(&CRASH_MODES, mode),
            seed: u64::from(seed),
        }),
        Op::Fault { kind, nth } => world.arm(fault(kind, nth)),
        Op::Sync => world.sync(),
        Op::Report {
            key,
            withdrawal: w,
            report: r,
        } => {
            if let Some(request) = withdrawal(world, w) {
                report(world, pick(KEYS, key), &request, r);
            }
        }
        Op::Correct { key, withdrawal: w } => {
            let truth = withdrawal(world, w)
                .and_then(|request| world.rail_truth(request.id().as_str()).cloned());
            if let Some(truth) = truth {
                world.correct(pick(KEYS, key), &truth);
            }
        }
    }
}

/// What the rail later says of `request` to `key`, by `byte`: for money
/// that moved, the truth moved on (confirmed, failed, bumped; the report
/// lost one time in four), or the truth again; for money that never
/// moved, a send reported to a key that holds none.
fn report(world: &mut World, key: &str, request: &WithdrawalRequest, byte: u8) {
    let Some(truth) = world.rail_truth(request.id().as_str()).cloned() else {
        world.rail_report("nobody", &sent(request, "0xlate"));
        return;
    };
    let moved = match byte % 4 {
        0 => later(&truth, Later::Confirmed),
        1 => later(&truth, Later::Failed),
        2 => later(&truth, Later::Bumped(byte / 4 % 3)),
        _ => None,
    };
    match moved {
        Some(moved) => world.rail_moves_on(key, &moved, !(byte / 16).is_multiple_of(4)),
        None => world.rail_report(key, &truth),
    }
}

/// Runs the operations the bytes describe in a fresh world, then closes
/// and reopens once more. The world checks every property after every step.
///
/// # Panics
/// When a property does not hold: that is the finding.
pub fn ledger_ops(data: &[u8]) {
    let _ = played(data);
}

/// [`ledger_ops`], returning what the world did; `None` for an empty input.
///
/// # Panics
/// When a property does not hold.
pub fn played(data: &[u8]) -> Option<Stats> {
    let (&flags, mut rest) = data.split_first()?;
    let config = WorldConfig {
        accept_foreign_ids: flags & 1 != 0,
        log_refusals: flags & 2 == 0,
        replay_on_two_threads: flags & 4 != 0,
        set_apart_settled: flags & 8 != 0,
    };
    let mut world = World::new(config);
    for _ in 0..OPS_MAX {
        let Some(op) = Op::decode(&mut rest) else {
            break;
        };
        run(&mut world, op);
    }
    world.reopen();
    Some(world.stats())
}
