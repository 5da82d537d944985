//! Hash slots: a key's slot, the key a command is routed by, and the slot
//! map a node reports (`CLUSTER SLOTS`), as Redis Cluster defines them.

use redis::{Arg, Cmd, Value};

/// Hash slots in a cluster.
pub(crate) const SLOTS: usize = 16_384;

/// The hash slot of `key`: CRC16/XMODEM of its hash tag (the bytes between
/// the first `{` and the next `}`, when not empty), else of the whole key,
/// modulo 16,384.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tagged) % SLOTS as u16
}

/// CRC16/XMODEM (polynomial 0x1021, initial 0), bit by bit: a key is
/// short, and this runs once per call.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The key `cmd` is routed by, `None` for a command without one (`PING`,
/// `SCRIPT`, `COMMAND`, `INFO`, `CLUSTER`, `WAIT`, a script called with no
/// key). Scripts (`EVAL`, `EVALSHA`, `FCALL` and their `_RO` forms) name
/// their first key after the key count; every other command the crate
/// sends (the module's, `INCRBY`, `EXPIRE`) has it first.
pub(crate) fn command_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().map(|a| match a {
        Arg::Simple(bytes) => bytes,
        _ => &[][..],
    });
    let name = args.next()?.to_ascii_uppercase();
    match name.as_slice() {
        b"PING" | b"SCRIPT" | b"COMMAND" | b"INFO" | b"CLUSTER" | b"WAIT" | b"ASKING"
        | b"FUNCTION" | b"ROLE" => None,
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" | b"FCALL" | b"FCALL_RO" => {
            let _script = args.next()?;
            let count: usize = std::str::from_utf8(args.next()?).ok()?.parse().ok()?;
            if count == 0 { None } else { args.next() }
        }
        _ => args.next(),
    }
}

/// Whether `cmd` is meant for every master (`SCRIPT …`, `FUNCTION …`:
/// a script loaded on one node only would still be missing where its keys
/// live), as the redis crate's cluster client routes them.
pub(crate) fn for_every_master(cmd: &Cmd) -> bool {
    matches!(
        cmd.args_iter().next(),
        Some(Arg::Simple(name)) if name.eq_ignore_ascii_case(b"SCRIPT") || name.eq_ignore_ascii_case(b"FUNCTION")
    )
}

/// One range of slots and its master's address (`host:port`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) start: u16,
    pub(crate) end: u16,
    pub(crate) master: String,
}

/// The ranges of a `CLUSTER SLOTS` reply; `host` stands for a master
/// whose address the node left empty (it knows it only by its link).
/// `None` for a reply of another shape.
pub(crate) fn parse_slots(reply: &Value, host: &str) -> Option<Vec<Range>> {
    let Value::Array(items) = reply else {
        return None;
    };
    items
        .iter()
        .map(|item| {
            let Value::Array(fields) = item else {
                return None;
            };
            let int = |v: &Value| match v {
                Value::Int(i) => u16::try_from(*i).ok(),
                _ => None,
            };
            let start = int(fields.first()?)?;
            let end = int(fields.get(1)?)?;
            let Value::Array(master) = fields.get(2)? else {
                return None;
            };
            let ip = match master.first()? {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            let port = match master.get(1)? {
                Value::Int(p) => u16::try_from(*p).ok()?,
                _ => return None,
            };
            let ip = if ip.is_empty() || ip == "?" {
                host.to_owned()
            } else {
                ip
            };
            (start <= end && usize::from(end) < SLOTS).then(|| Range {
                start,
                end,
                master: format!("{ip}:{port}"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_the_servers() {
        // The test kit's function is checked against `CLUSTER KEYSLOT`.
        assert_eq!(key_slot(b"foo"), 12_182);
        for key in ["a", "foo", "{user1000}.following", "x{}y", "{}{a}", "é{b}c"] {
            assert_eq!(
                key_slot(key.as_bytes()),
                tollgate_testkit::key_slot(key.as_bytes()),
                "{key}"
            );
        }
    }

    #[test]
    fn commands_are_routed_by_their_first_key() {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg("abc").arg(2).arg("k1").arg("k2").arg("x");
        assert_eq!(command_key(&eval), Some(&b"k1"[..]));
        let mut none = redis::cmd("EVAL");
        none.arg("return 1").arg(0);
        assert_eq!(command_key(&none), None);
        let mut incr = redis::cmd("INCRBY");
        incr.arg("k").arg(1);
        assert_eq!(command_key(&incr), Some(&b"k"[..]));
        let mut module = redis::cmd("tollgate.lean");
        module.arg("key").arg(1);
        assert_eq!(command_key(&module), Some(&b"key"[..]));
        assert_eq!(command_key(&redis::cmd("PING")), None);
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg("return 1");
        assert_eq!(command_key(&load), None);
        assert!(for_every_master(&load));
        assert!(!for_every_master(&incr));
    }

    #[test]
    fn a_slots_reply_is_read_with_empty_hosts_filled() {
        let node = |ip: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(ip.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("", 7001),
                node("10.0.0.3", 7002),
            ]),
        ]);
        let ranges = parse_slots(&reply, "10.0.0.9").unwrap();
        assert_eq!(ranges[0].master, "10.0.0.1:7000");
        assert_eq!(ranges[1].master, "10.0.0.9:7001");
        assert_eq!((ranges[1].start, ranges[1].end), (5461, 16383));
        assert!(parse_slots(&Value::Int(1), "h").is_none());
    }
}
