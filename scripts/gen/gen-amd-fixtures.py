#!/usr/bin/env python3
"""Writes tests/fixtures/amdgpu-sysfs: a sysfs tree with four amdgpu cards (and one that is
not amdgpu), laid out as the amdgpu driver and the PCI core lay them out, with gpu_metrics
tables packed in the kernel's v1.3, v1.4 and v1.5 layouts (kgd_pp_interface.h) and one
revision gpuwarden does not read. tests/all/amd.rs asserts the metrics these values give.

    python3 scripts/gen/gen-amd-fixtures.py
"""
import os
import shutil
import struct

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "amdgpu-sysfs")
U16_NA = 0xFFFF


def write(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    mode = "wb" if isinstance(content, bytes) else "w"
    with open(path, mode) as f:
        f.write(content)


def v1_3(edge, hotspot, mem, gfx, umc, power, energy_j, gfxclk, uclk, width, speed_tenths, hbm, throttle):
    # header, 6 temperatures, 3 activities, socket power, energy, system clock,
    # 7 average clocks, 7 current clocks, throttle, fan, pcie width/speed, padding,
    # 2 activity accumulators, 4 HBM temperatures, firmware timestamp, 3 voltages, padding,
    # ASIC-independent throttle status: 120 bytes.
    t = struct.pack("<HBB", 120, 1, 3)
    t += struct.pack("<6H", edge, hotspot, mem, U16_NA, U16_NA, U16_NA)
    t += struct.pack("<3H", gfx, umc, U16_NA)
    t += struct.pack("<H", power)
    t += struct.pack("<QQ", int(energy_j * 65536), 123456789)
    t += struct.pack("<7H", *[U16_NA] * 7)
    t += struct.pack("<7H", gfxclk, U16_NA, uclk, U16_NA, U16_NA, U16_NA, U16_NA)
    t += struct.pack("<I", 0)  # ASIC-dependent throttle status
    t += struct.pack("<HHHH", U16_NA, width, speed_tenths, 0)
    t += struct.pack("<II", 0, 0)
    t += struct.pack("<4H", *hbm)
    t += struct.pack("<Q", 0)
    t += struct.pack("<4H", 850, 900, 1200, 0)
    t += struct.pack("<Q", throttle)
    assert len(t) == 120, len(t)
    return t


def v1_4_or_5(content, hotspot, mem, power, gfx, umc, energy_j, width, speed_tenths, replays, gfxclk, uclk):
    size = 288 if content == 4 else 360
    t = struct.pack("<HBB", size, 1, content)
    t += struct.pack("<3H", hotspot, mem, U16_NA)
    t += struct.pack("<H", power)
    t += struct.pack("<2H", gfx, umc)
    t += struct.pack("<4H", 0, 0, 0, 0)  # VCN activity
    if content == 5:
        t += struct.pack("<32H", *[0] * 32)  # JPEG activity
    t += struct.pack("<QQ", int(energy_j * 65536), 987654321)
    t += struct.pack("<II", 0, 0)  # throttle status (ASIC dependent), gfxclk lock status
    t += struct.pack("<4H", width, speed_tenths, 8, 32)  # PCIe, XGMI
    t += struct.pack("<II", 0, 0)
    t += struct.pack("<QQQQQ", 0, 0, 0, replays, 0)
    if content == 5:
        t += struct.pack("<II", 0, 0)  # NAK sent, received
    t += struct.pack("<16Q", *[0] * 16)  # XGMI read, write
    t += struct.pack("<Q", 0)  # firmware timestamp
    t += struct.pack("<8H", *([gfxclk] + [gfxclk - 10] * 7))
    t += struct.pack("<4H4H4H", *[U16_NA] * 12)
    t += struct.pack("<HH", uclk, 0)
    t += b"\0" * (size - len(t))  # the struct's tail alignment
    assert len(t) == size, (content, len(t))
    return t


def card(n, driver, slot, pci_id, files):
    device = os.path.join(ROOT, "sys", "class", "drm", f"card{n}", "device")
    write(os.path.join(device, "uevent"), f"DRIVER={driver}\nPCI_CLASS=38000\nPCI_ID={pci_id}\nPCI_SLOT_NAME={slot}\n")
    for name, content in files.items():
        write(os.path.join(device, name), content)


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    write(os.path.join(ROOT, "sys", "module", "amdgpu", "version"), "6.10.5\n")
    # A connector and a render node: not cards.
    write(os.path.join(ROOT, "sys", "class", "drm", "card0-DP-1", "status"), "disconnected\n")
    write(os.path.join(ROOT, "sys", "class", "drm", "renderD128", "dev"), "226:128\n")

    # card0: MI210 (gpu_metrics v1.3), everything in files, throttled by power and hotspot.
    card(0, "amdgpu", "0000:c1:00.0", "1002:740F", {
        "unique_id": "9c1a2b3c4d5e6f70\n",
        "serial_number": "692251001234\n",
        "hwmon/hwmon3/name": "amdgpu\n",
        "hwmon/hwmon3/temp1_label": "edge\n", "hwmon/hwmon3/temp1_input": "45000\n",
        "hwmon/hwmon3/temp2_label": "junction\n", "hwmon/hwmon3/temp2_input": "52000\n",
        "hwmon/hwmon3/temp2_crit": "105000\n", "hwmon/hwmon3/temp2_emergency": "110000\n",
        "hwmon/hwmon3/temp3_label": "mem\n", "hwmon/hwmon3/temp3_input": "48000\n",
        "hwmon/hwmon3/temp3_crit": "95000\n",
        "hwmon/hwmon3/power1_average": "212000000\n", "hwmon/hwmon3/power1_cap": "300000000\n",
        "gpu_busy_percent": "87\n", "mem_busy_percent": "35\n",
        "mem_info_vram_used": "17179869184\n", "mem_info_vram_total": "68702699520\n",
        "current_link_speed": "16.0 GT/s PCIe\n", "current_link_width": "16\n",
        "max_link_speed": "16.0 GT/s PCIe\n", "max_link_width": "16\n",
        "pcie_replay_count": "3\n",
        "ras/umc_err_count": "ue: 0\nce: 5\n", "ras/gfx_err_count": "ue: 1\nce: 2\n",
        "ras/xgmi_wafl_err_count": "ue: 0\nce: 9\n",
        "ras/features": "feature mask: 0x3fbb\n",
        "gpu_metrics": v1_3(45, 52, 48, 87, 35, 212, 123456, 1700, 1600, 16, 160, (50, 53, 51, 49),
                            (1 << 36) | 1),
    })
    # card1: MI300X (gpu_metrics v1.5), no edge sensor, power1_input, link trained at x8 of
    # x16 and Gen4 of Gen5, replays only in gpu_metrics.
    card(1, "amdgpu", "0000:0c:00.0", "1002:74A1", {
        "unique_id": "2f1e3d4c5b6a7988\n",
        "hwmon/hwmon4/name": "amdgpu\n",
        "hwmon/hwmon4/temp2_label": "junction\n", "hwmon/hwmon4/temp2_input": "61000\n",
        "hwmon/hwmon4/temp2_crit": "100000\n", "hwmon/hwmon4/temp2_emergency": "105000\n",
        "hwmon/hwmon4/temp3_label": "mem\n", "hwmon/hwmon4/temp3_input": "55000\n",
        "hwmon/hwmon4/temp3_crit": "95000\n",
        "hwmon/hwmon4/power1_input": "550000000\n", "hwmon/hwmon4/power1_cap": "750000000\n",
        "gpu_busy_percent": "99\n",
        "mem_info_vram_used": "109521666048\n", "mem_info_vram_total": "206141652992\n",
        "current_link_speed": "16.0 GT/s PCIe\n", "current_link_width": "8\n",
        "max_link_speed": "32.0 GT/s PCIe\n", "max_link_width": "16\n",
        "ras/umc_err_count": "ue: 0\nce: 0\n",
        "gpu_metrics": v1_4_or_5(5, 61, 55, 550, 99, 40, 5000000, 8, 160, 7, 2100, 1300),
    })
    # card2: MI300X (gpu_metrics v1.4) with a product name and no hwmon: temperatures and
    # power come from gpu_metrics alone.
    card(2, "amdgpu", "0000:1f:00.0", "1002:74A1", {
        "unique_id": "5a4b3c2d1e0f9a8b\n",
        "product_name": "AMD Instinct MI300X OAM\n",
        "mem_info_vram_used": "0\n", "mem_info_vram_total": "206141652992\n",
        "current_link_speed": "32.0 GT/s PCIe\n", "current_link_width": "16\n",
        "max_link_speed": "32.0 GT/s PCIe\n", "max_link_width": "16\n",
        "gpu_metrics": v1_4_or_5(4, 58, 50, 480, 0, 0, 4000000, 16, 320, 0, 2050, 1300),
    })
    # card3: an MI210 whose gpu_metrics has a revision gpuwarden does not read (v1.9), on a
    # board with a fan controller in hwmon (pwm1 of pwm1_max: 40 %); the other cards have none.
    table = bytearray(v1_3(40, 44, 42, 0, 0, 90, 10, 800, 1600, 16, 160, (40, 40, 40, 40), 0))
    table[3] = 9
    card(3, "amdgpu", "0000:2a:00.0", "1002:740F", {
        "hwmon/hwmon5/name": "amdgpu\n",
        "hwmon/hwmon5/temp1_label": "edge\n", "hwmon/hwmon5/temp1_input": "40000\n",
        "hwmon/hwmon5/power1_average": "90000000\n",
        "hwmon/hwmon5/pwm1": "102\n", "hwmon/hwmon5/pwm1_max": "255\n",
        "gpu_busy_percent": "0\n",
        "gpu_metrics": bytes(table),
    })
    # card4: not an amdgpu card.
    card(4, "i915", "0000:00:02.0", "8086:A780", {"gpu_busy_percent": "0\n"})


if __name__ == "__main__":
    main()
