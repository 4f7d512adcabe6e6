//! NVSwitch errors (SXIDs): what `gpuwarden xid explain` can say of a code, from the unit
//! of the switch it comes from. The nvswitch driver numbers its hardware errors in blocks of
//! a thousand, one block per unit (its `NVSWITCH_ERR_HW_*` enum, in NVIDIA's
//! open-gpu-kernel-modules); the driver's own line says whether an error is fatal, so the
//! severity is never taken from this table.

/// One block of SXID codes.
pub(crate) struct Block {
    pub first: u32,
    pub unit: &'static str,
    pub what: &'static str,
}

/// The blocks, by their first code.
pub(crate) const BLOCKS: &[Block] = &[
    Block {
        first: 10000,
        unit: "host",
        what: "the switch's host interface: PRIV errors and time-outs, thermal events, firmware start-up",
    },
    Block {
        first: 11000,
        unit: "NPORT ingress",
        what: "packets entering a port: decode, routing-table and ECC errors",
    },
    Block {
        first: 12000,
        unit: "NPORT egress",
        what: "packets leaving a port: buffer, credit, ECC and response errors",
    },
    Block {
        first: 13000,
        unit: "NPORT fstate",
        what: "a port's flush state: tag pool and crumbstore ECC errors",
    },
    Block {
        first: 14000,
        unit: "NPORT tstate",
        what: "a port's transaction state: tag pool, crumbstore ECC and time-out errors",
    },
    Block {
        first: 15000,
        unit: "NPORT route",
        what: "routing: table ECC and invalid-route errors",
    },
    Block {
        first: 16000,
        unit: "NPORT",
        what: "a port: poisoned data, internal errors",
    },
    Block {
        first: 17000,
        unit: "NVLCTRL",
        what: "the NVLink controller's buffers",
    },
    Block {
        first: 18000,
        unit: "NVLIPT",
        what: "the NVLink transaction layer: protocol, time-out and overflow errors",
    },
    Block {
        first: 19000,
        unit: "NVLTLC",
        what: "the NVLink transaction layer's TX/RX: credit, parity and ECC errors",
    },
    Block {
        first: 20000,
        unit: "DLPL",
        what: "the NVLink data link and physical layer: replays, recoveries, link training faults (LTSSM)",
    },
    Block {
        first: 21000,
        unit: "AFS",
        what: "credit and routing errors between the switch's ports",
    },
    Block {
        first: 22000,
        unit: "MINION",
        what: "the link microcontroller: firmware halts, time-outs, link commands",
    },
    Block {
        first: 23000,
        unit: "NXBAR",
        what: "the crossbar: buffer and credit errors",
    },
    Block {
        first: 24000,
        unit: "NPORT sourcetrack",
        what: "request tracking: crumbstore ECC and time-outs",
    },
    Block {
        first: 25000,
        unit: "NVLIPT link",
        what: "a link's state requests and training",
    },
];

/// The block `code` falls in; None outside the known blocks.
pub(crate) fn block(code: u32) -> Option<&'static Block> {
    BLOCKS.iter().find(|b| (b.first..b.first + 1000).contains(&code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_fall_in_their_units_block_and_others_in_none() {
        assert_eq!(block(12028).map(|b| b.unit), Some("NPORT egress"));
        assert_eq!(block(20034).map(|b| b.unit), Some("DLPL"));
        assert_eq!(block(10000).map(|b| b.unit), Some("host"));
        assert_eq!(block(25999).map(|b| b.unit), Some("NVLIPT link"));
        assert!(block(9999).is_none() && block(26000).is_none() && block(79).is_none());
        for pair in BLOCKS.windows(2) {
            assert_eq!(pair[1].first, pair[0].first + 1000);
        }
    }
}
