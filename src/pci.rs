//! PCI bus ids in one form everywhere: `0000:3b:00.0`, lower case, four-digit domain.
//!
//! NVML writes `00000000:3B:00.0`; the kernel log writes `0000:3b:00` (no function); sysfs
//! writes `0000:3b:00.0`. XIDs from the kernel log are matched to GPUs by this form.

/// Normalises any of those forms; None when `text` is not a PCI address.
pub fn normalize_bus_id(text: &str) -> Option<String> {
    let text = text.trim();
    let (address, function) = match text.split_once('.') {
        Some((a, f)) => (a, f),
        None => (text, "0"),
    };
    let parts: Vec<&str> = address.split(':').collect();
    let is_hex = |s: &str, max: usize| !s.is_empty() && s.len() <= max && s.chars().all(|c| c.is_ascii_hexdigit());
    if parts.len() != 3 || !is_hex(parts[0], 8) || !is_hex(parts[1], 2) || !is_hex(parts[2], 2) || !is_hex(function, 1)
    {
        return None;
    }
    let domain = u32::from_str_radix(parts[0], 16).ok()?;
    let bus = u32::from_str_radix(parts[1], 16).ok()?;
    let device = u32::from_str_radix(parts[2], 16).ok()?;
    let function = u32::from_str_radix(function, 16).ok()?;
    if domain > 0xffff {
        return None;
    }
    Some(format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"))
}

#[cfg(test)]
mod tests {
    use super::normalize_bus_id;

    #[test]
    fn every_form_becomes_the_kernel_form() {
        assert_eq!(normalize_bus_id("00000000:19:00.0").as_deref(), Some("0000:19:00.0"));
        assert_eq!(normalize_bus_id("00000001:9A:00.0").as_deref(), Some("0001:9a:00.0"));
        assert_eq!(normalize_bus_id("0000:3B:00").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(normalize_bus_id("0000:19:00.0").as_deref(), Some("0000:19:00.0"));
    }

    #[test]
    fn non_addresses_are_refused() {
        assert_eq!(normalize_bus_id("3b:00.0"), None);
        assert_eq!(normalize_bus_id("0000:3b:00.10"), None);
        assert_eq!(normalize_bus_id("0000:zz:00.0"), None);
        assert_eq!(normalize_bus_id(""), None);
    }
}
