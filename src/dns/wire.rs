//! The DNS wire format (RFC 1035, with RFC 2782 SRV, RFC 3596 AAAA and the RFC 6891 OPT
//! record's UDP size): parsing with compression pointers, serialising with name
//! compression, and UDP truncation with the TC bit. Pure; no I/O.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

pub const TYPE_A: u16 = 1;
pub const TYPE_NS: u16 = 2;
pub const TYPE_CNAME: u16 = 5;
pub const TYPE_SOA: u16 = 6;
pub const TYPE_PTR: u16 = 12;
pub const TYPE_TXT: u16 = 16;
pub const TYPE_AAAA: u16 = 28;
pub const TYPE_SRV: u16 = 33;
pub const TYPE_OPT: u16 = 41;
pub const TYPE_ANY: u16 = 255;
pub const CLASS_IN: u16 = 1;

pub const RCODE_NOERROR: u8 = 0;
pub const RCODE_FORMERR: u8 = 1;
pub const RCODE_SERVFAIL: u8 = 2;
pub const RCODE_NXDOMAIN: u8 = 3;
pub const RCODE_NOTIMP: u8 = 4;
pub const RCODE_REFUSED: u8 = 5;

/// The classic UDP payload limit without EDNS.
pub const UDP_LIMIT: usize = 512;

/// Why a message could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message truncated at byte {0}")]
    Short(usize),
    #[error("bad name at byte {0}")]
    BadName(usize),
    #[error("compression pointer loop at byte {0}")]
    PointerLoop(usize),
}

/// A record's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RData {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Cname(String),
    Ptr(String),
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: String,
    },
    Soa {
        mname: String,
        rname: String,
        serial: u32,
        refresh: u32,
        retry: u32,
        expire: u32,
        minimum: u32,
    },
    /// Anything else, kept as bytes (names inside are not decompressed).
    Raw(u16, Vec<u8>),
}

impl RData {
    pub fn rtype(&self) -> u16 {
        match self {
            RData::A(_) => TYPE_A,
            RData::Aaaa(_) => TYPE_AAAA,
            RData::Cname(_) => TYPE_CNAME,
            RData::Ptr(_) => TYPE_PTR,
            RData::Srv { .. } => TYPE_SRV,
            RData::Soa { .. } => TYPE_SOA,
            RData::Raw(t, _) => *t,
        }
    }
}

/// A resource record. For OPT, `class` is the UDP payload size and `ttl` the flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Lower-case, no trailing dot ("" is the root).
    pub name: String,
    pub class: u16,
    pub ttl: u32,
    pub data: RData,
}

/// A question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
}

/// A whole message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    pub id: u16,
    /// The flags word (QR, opcode, AA, TC, RD, RA, rcode).
    pub flags: u16,
    pub questions: Vec<Question>,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    pub additional: Vec<Record>,
}

impl Message {
    pub fn is_response(&self) -> bool {
        self.flags & 0x8000 != 0
    }
    pub fn opcode(&self) -> u8 {
        ((self.flags >> 11) & 0xf) as u8
    }
    pub fn rcode(&self) -> u8 {
        (self.flags & 0xf) as u8
    }
    pub fn truncated(&self) -> bool {
        self.flags & 0x0200 != 0
    }
    pub fn recursion_desired(&self) -> bool {
        self.flags & 0x0100 != 0
    }

    /// The UDP payload size the client accepts (its OPT record, at least 512).
    pub fn udp_size(&self) -> usize {
        self.additional
            .iter()
            .find(|r| r.data.rtype() == TYPE_OPT)
            .map(|r| usize::from(r.class).max(UDP_LIMIT))
            .unwrap_or(UDP_LIMIT)
    }

    /// A response skeleton for this query: same id and question, QR and AA set, RD copied,
    /// RA set (we forward), and the rcode.
    pub fn response(&self, rcode: u8) -> Message {
        Message {
            id: self.id,
            flags: 0x8000
                | 0x0400
                | (self.flags & 0x0100)
                | 0x0080
                | (self.opcode() as u16) << 11
                | u16::from(rcode),
            questions: self.questions.clone(),
            ..Message::default()
        }
    }

    pub fn parse(bytes: &[u8]) -> Result<Message, WireError> {
        let mut r = Reader { bytes, pos: 0 };
        let id = r.u16()?;
        let flags = r.u16()?;
        let counts = [r.u16()?, r.u16()?, r.u16()?, r.u16()?];
        let mut questions = Vec::new();
        for _ in 0..counts[0] {
            let name = r.name()?;
            questions.push(Question {
                name,
                qtype: r.u16()?,
                qclass: r.u16()?,
            });
        }
        let mut sections = [Vec::new(), Vec::new(), Vec::new()];
        for (section, count) in sections.iter_mut().zip(&counts[1..]) {
            for _ in 0..*count {
                section.push(r.record()?);
            }
        }
        let [answers, authority, additional] = sections;
        Ok(Message {
            id,
            flags,
            questions,
            answers,
            authority,
            additional,
        })
    }

    /// Serialises with name compression.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u16(self.id);
        w.u16(self.flags);
        for count in [
            self.questions.len(),
            self.answers.len(),
            self.authority.len(),
            self.additional.len(),
        ] {
            w.u16(u16::try_from(count).unwrap_or(u16::MAX));
        }
        for q in &self.questions {
            w.name(&q.name);
            w.u16(q.qtype);
            w.u16(q.qclass);
        }
        for record in self
            .answers
            .iter()
            .chain(&self.authority)
            .chain(&self.additional)
        {
            w.record(record);
        }
        w.out
    }

    /// Serialises for UDP: when the message exceeds `limit`, records are dropped from the
    /// end (additional, then authority, then answers) until it fits, and TC is set when an
    /// answer had to go (RFC 2181 §9: dropping only additional data is not truncation).
    pub fn to_udp_bytes(&self, limit: usize) -> Vec<u8> {
        let bytes = self.to_bytes();
        if bytes.len() <= limit {
            return bytes;
        }
        let mut m = self.clone();
        let opt: Vec<Record> = m
            .additional
            .iter()
            .filter(|r| r.data.rtype() == TYPE_OPT)
            .cloned()
            .collect();
        m.additional = opt;
        m.authority.clear();
        loop {
            let bytes = m.to_bytes();
            if bytes.len() <= limit || (m.answers.is_empty() && m.additional.is_empty()) {
                return bytes;
            }
            if m.answers.pop().is_some() {
                m.flags |= 0x0200;
            } else {
                m.additional.clear();
            }
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], WireError> {
        let end = self.pos.checked_add(n).ok_or(WireError::Short(self.pos))?;
        let slice = self
            .bytes
            .get(self.pos..end)
            .ok_or(WireError::Short(self.pos))?;
        self.pos = end;
        Ok(slice)
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Reads a possibly compressed name at the cursor; lower-cased, dot-separated.
    fn name(&mut self) -> Result<String, WireError> {
        let mut labels: Vec<String> = Vec::new();
        let mut pos = self.pos;
        let mut jumped = false;
        let mut jumps = 0;
        let mut length = 0usize;
        loop {
            let len = *self.bytes.get(pos).ok_or(WireError::Short(pos))? as usize;
            match len & 0xc0 {
                0x00 if len == 0 => {
                    pos += 1;
                    break;
                }
                0x00 => {
                    let label = self
                        .bytes
                        .get(pos + 1..pos + 1 + len)
                        .ok_or(WireError::Short(pos))?;
                    length += len + 1;
                    if length > 255 {
                        return Err(WireError::BadName(pos));
                    }
                    labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
                    pos += 1 + len;
                }
                0xc0 => {
                    let low = *self.bytes.get(pos + 1).ok_or(WireError::Short(pos))? as usize;
                    if !jumped {
                        self.pos = pos + 2;
                        jumped = true;
                    }
                    jumps += 1;
                    if jumps > 64 {
                        return Err(WireError::PointerLoop(pos));
                    }
                    pos = ((len & 0x3f) << 8) | low;
                }
                _ => return Err(WireError::BadName(pos)),
            }
        }
        if !jumped {
            self.pos = pos;
        }
        Ok(labels.join("."))
    }

    fn record(&mut self) -> Result<Record, WireError> {
        let name = self.name()?;
        let rtype = self.u16()?;
        let class = self.u16()?;
        let ttl = self.u32()?;
        let len = self.u16()? as usize;
        let start = self.pos;
        let end = start + len;
        if end > self.bytes.len() {
            return Err(WireError::Short(start));
        }
        let data = match rtype {
            TYPE_A if len == 4 => {
                let b = self.take(4)?;
                RData::A(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
            }
            TYPE_AAAA if len == 16 => {
                let b: [u8; 16] = self
                    .take(16)?
                    .try_into()
                    .map_err(|_| WireError::Short(start))?;
                RData::Aaaa(Ipv6Addr::from(b))
            }
            TYPE_CNAME => RData::Cname(self.name()?),
            TYPE_PTR => RData::Ptr(self.name()?),
            TYPE_SRV => RData::Srv {
                priority: self.u16()?,
                weight: self.u16()?,
                port: self.u16()?,
                target: self.name()?,
            },
            TYPE_SOA => RData::Soa {
                mname: self.name()?,
                rname: self.name()?,
                serial: self.u32()?,
                refresh: self.u32()?,
                retry: self.u32()?,
                expire: self.u32()?,
                minimum: self.u32()?,
            },
            _ => RData::Raw(rtype, self.take(len)?.to_vec()),
        };
        if self.pos != end {
            return Err(WireError::Short(start));
        }
        Ok(Record {
            name,
            class,
            ttl,
            data,
        })
    }
}

#[derive(Default)]
struct Writer {
    out: Vec<u8>,
    /// Suffix → offset of its first occurrence, for compression pointers.
    names: HashMap<String, usize>,
}

impl Writer {
    fn u16(&mut self, v: u16) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    fn name(&mut self, name: &str) {
        let name = name.trim_end_matches('.');
        let mut rest = name;
        while !rest.is_empty() {
            if let Some(&offset) = self.names.get(&rest.to_ascii_lowercase()) {
                self.u16(0xc000 | offset as u16);
                return;
            }
            if self.out.len() < 0x3fff {
                self.names.insert(rest.to_ascii_lowercase(), self.out.len());
            }
            let (label, tail) = rest.split_once('.').unwrap_or((rest, ""));
            let label = &label.as_bytes()[..label.len().min(63)];
            self.out.push(label.len() as u8);
            self.out.extend_from_slice(label);
            rest = tail;
        }
        self.out.push(0);
    }

    fn record(&mut self, r: &Record) {
        self.name(&r.name);
        self.u16(r.data.rtype());
        self.u16(r.class);
        self.u32(r.ttl);
        let len_at = self.out.len();
        self.u16(0);
        match &r.data {
            RData::A(ip) => self.out.extend_from_slice(&ip.octets()),
            RData::Aaaa(ip) => self.out.extend_from_slice(&ip.octets()),
            RData::Cname(n) | RData::Ptr(n) => self.name(n),
            RData::Srv {
                priority,
                weight,
                port,
                target,
            } => {
                self.u16(*priority);
                self.u16(*weight);
                self.u16(*port);
                // RFC 2782: the target is not compressed.
                let saved = std::mem::take(&mut self.names);
                self.name(target);
                self.names = saved;
            }
            RData::Soa {
                mname,
                rname,
                serial,
                refresh,
                retry,
                expire,
                minimum,
            } => {
                self.name(mname);
                self.name(rname);
                for v in [serial, refresh, retry, expire, minimum] {
                    self.u32(*v);
                }
            }
            RData::Raw(_, bytes) => self.out.extend_from_slice(bytes),
        }
        let len = (self.out.len() - len_at - 2) as u16;
        self.out[len_at..len_at + 2].copy_from_slice(&len.to_be_bytes());
    }
}

/// A query message (RD set) for `name`/`qtype`.
pub fn query(id: u16, name: &str, qtype: u16) -> Message {
    Message {
        id,
        flags: 0x0100,
        questions: vec![Question {
            name: name.trim_end_matches('.').to_ascii_lowercase(),
            qtype,
            qclass: CLASS_IN,
        }],
        ..Message::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(name: &str, ip: [u8; 4]) -> Record {
        Record {
            name: name.into(),
            class: CLASS_IN,
            ttl: 5,
            data: RData::A(Ipv4Addr::from(ip)),
        }
    }

    #[test]
    fn round_trips_every_record_kind() {
        let mut m = query(7, "Web.Default.svc.cluster.local.", TYPE_ANY).response(RCODE_NOERROR);
        m.answers = vec![
            a("web.default.svc.cluster.local", [10, 43, 0, 5]),
            Record {
                name: "web.default.svc.cluster.local".into(),
                class: CLASS_IN,
                ttl: 5,
                data: RData::Aaaa("fd00::5".parse().expect("v6")),
            },
            Record {
                name: "_http._tcp.web.default.svc.cluster.local".into(),
                class: CLASS_IN,
                ttl: 5,
                data: RData::Srv {
                    priority: 0,
                    weight: 100,
                    port: 80,
                    target: "web.default.svc.cluster.local".into(),
                },
            },
            Record {
                name: "5.0.43.10.in-addr.arpa".into(),
                class: CLASS_IN,
                ttl: 5,
                data: RData::Ptr("web.default.svc.cluster.local".into()),
            },
            Record {
                name: "ext.default.svc.cluster.local".into(),
                class: CLASS_IN,
                ttl: 5,
                data: RData::Cname("example.com".into()),
            },
        ];
        m.authority = vec![Record {
            name: "cluster.local".into(),
            class: CLASS_IN,
            ttl: 5,
            data: RData::Soa {
                mname: "ns.dns.cluster.local".into(),
                rname: "hostmaster.cluster.local".into(),
                serial: 1,
                refresh: 7200,
                retry: 1800,
                expire: 86400,
                minimum: 5,
            },
        }];
        let bytes = m.to_bytes();
        let parsed = Message::parse(&bytes).expect("parse");
        assert_eq!(parsed.questions[0].name, "web.default.svc.cluster.local");
        assert_eq!(parsed, m);
        assert!(parsed.is_response() && parsed.recursion_desired());
    }

    #[test]
    fn names_are_compressed_with_pointers() {
        let mut m = query(1, "web.default.svc.cluster.local", TYPE_A).response(RCODE_NOERROR);
        m.answers = vec![a("web.default.svc.cluster.local", [10, 0, 0, 1])];
        let bytes = m.to_bytes();
        // Header 12 + question name 31 + 4; the answer's name is a 2-byte pointer to 12.
        assert_eq!(&bytes[47..49], &[0xc0, 12]);
        assert_eq!(bytes.len(), 12 + 31 + 4 + 2 + 10 + 4);
    }

    #[test]
    fn parses_pointers_written_by_others_and_refuses_loops() {
        // A question "a.b" then an answer whose name is "x" + pointer to "b" at offset 14.
        let mut bytes = vec![0, 1, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0];
        bytes.extend_from_slice(&[1, b'a', 1, b'b', 0, 0, 1, 0, 1]);
        bytes.extend_from_slice(&[1, b'x', 0xc0, 14, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 1, 2, 3, 4]);
        let m = Message::parse(&bytes).expect("parse");
        assert_eq!(m.answers[0].name, "x.b");
        assert_eq!(m.answers[0].data, RData::A(Ipv4Addr::new(1, 2, 3, 4)));
        let mut looped = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        looped.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        assert_eq!(Message::parse(&looped), Err(WireError::PointerLoop(12)));
        assert!(matches!(
            Message::parse(&bytes[..20]),
            Err(WireError::Short(_))
        ));
    }

    #[test]
    fn udp_truncation_sets_tc_and_fits_the_limit() {
        let mut m = query(3, "big.default.svc.cluster.local", TYPE_A).response(RCODE_NOERROR);
        for i in 0..100u8 {
            m.answers
                .push(a("big.default.svc.cluster.local", [10, 42, 0, i]));
        }
        assert!(m.to_bytes().len() > UDP_LIMIT);
        let bytes = m.to_udp_bytes(UDP_LIMIT);
        assert!(bytes.len() <= UDP_LIMIT);
        let parsed = Message::parse(&bytes).expect("parse");
        assert!(parsed.truncated());
        assert!(!parsed.answers.is_empty() && parsed.answers.len() < 100);
        // With a large EDNS size nothing is cut.
        let whole = Message::parse(&m.to_udp_bytes(4096)).expect("parse");
        assert_eq!(whole.answers.len(), 100);
        assert!(!whole.truncated());
    }
}
