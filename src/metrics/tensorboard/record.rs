//! TFRecord framing, as TensorBoard reads an events file: each record is its length (u64,
//! little-endian), the masked CRC32C of those 8 bytes, the data, and the masked CRC32C of the
//! data (`tensorflow/core/lib/io/record_writer.cc`). A reader that finds a CRC wrong stops
//! there, so a record cut short by a crash loses only itself.
//!
//! Must not: know what the records hold.

/// CRC32C as TFRecord stores it: rotated right by 15 bits plus a constant, so that a CRC of
/// data holding CRCs is not trivially related to them.
pub fn masked_crc(data: &[u8]) -> u32 {
    let c = crc32c::crc32c(data);
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// `data` as one record.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// The records of `bytes` whose framing and CRCs check, in order; stops at the first that
/// does not (a torn write at the end of a file).
pub fn records(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        let len_bytes = &bytes[at..at + 8];
        let len = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().expect("4 bytes"));
        if crc != masked_crc(len_bytes) || at + 12 + len + 4 > bytes.len() {
            break;
        }
        let data = &bytes[at + 12..at + 12 + len];
        let dcrc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().expect("4 bytes"));
        if dcrc != masked_crc(data) {
            break;
        }
        out.push(data);
        at += 16 + len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CRC32C check value ("123456789" → 0xE3069283, RFC 3720) and TensorFlow's masking;
    /// the framing read back, and a flipped bit ends the reading there.
    #[test]
    fn crc_framing_and_a_torn_record() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(masked_crc(b""), 0u32.rotate_right(15).wrapping_add(0xa282_ead8));
        let mut file = frame(b"first");
        file.extend(frame(b"second"));
        assert_eq!(records(&file), vec![&b"first"[..], &b"second"[..]]);
        let n = file.len();
        file[n - 6] ^= 1; // inside "second"
        assert_eq!(records(&file), vec![&b"first"[..]]);
        file.truncate(n - 3);
        assert_eq!(records(&file), vec![&b"first"[..]]);
    }
}
