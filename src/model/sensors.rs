//! Which temperature sensor and which clock domain a reading is of: closed sets, each value
//! the one string the wire uses (the `sensor` label of `gpu_temperature_celsius`, the `clock`
//! label of `gpu_clock_hertz`, the keys of `temperatures` and `clocks_hertz` in the JSON).
//! Code compares the enum, so a misspelt sensor is a compile error rather than a reading
//! that is silently never found.

crate::model::label::label_enum! {
    /// A temperature sensor: gpu and memory on NVIDIA; edge, junction and hbm on AMD.
    pub enum Sensor {
        /// NVIDIA's GPU (die) temperature.
        Gpu => "gpu",
        /// NVIDIA's memory (HBM) temperature, from a field value.
        Memory => "memory",
        /// AMD's edge sensor.
        Edge => "edge",
        /// AMD's junction (hotspot) sensor.
        Junction => "junction",
        /// AMD's HBM sensor (hwmon's `mem`).
        Hbm => "hbm",
    }
}

crate::model::label::label_enum! {
    /// A clock domain: sm, memory and graphics (AMD's gfxclk is both sm and graphics).
    pub enum ClockDomain {
        Sm => "sm",
        Memory => "memory",
        Graphics => "graphics",
    }
}
