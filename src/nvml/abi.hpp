// gpumem's own declarations of the part of the NVML C ABI it calls (no nvml.h, no link-time dependency).
// Layouts and constants follow NVIDIA's published nvml.h; they are shared by the dlopen loader
// (library.cpp) and the NVML test double (tests/nvml/fake_nvml.cpp), so both sides agree by construction
// and the GPU check (scripts/gpu-check-monitor.sh) proves them against the real driver.
#pragma once
#include <cstdint>

namespace gpumem::nvml::abi {

using Return = int;  // nvmlReturn_t
using Device = struct DeviceOpaque*;  // nvmlDevice_t

inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorLibraryNotFound = 12;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorArgumentVersionMismatch = 25;
inline constexpr Return kErrorUnknown = 999;

inline constexpr unsigned kTemperatureGpu = 0;  // nvmlTemperatureSensors_t
inline constexpr unsigned kClockGraphics = 0;   // nvmlClockType_t
inline constexpr unsigned kClockSm = 1;
inline constexpr unsigned kClockMem = 2;
inline constexpr unsigned kPcieTxBytes = 0;     // nvmlPcieUtilCounter_t (KB/s)
inline constexpr unsigned kPcieRxBytes = 1;
inline constexpr unsigned kEccCorrected = 0;    // nvmlMemoryErrorType_t
inline constexpr unsigned kEccUncorrected = 1;
inline constexpr unsigned kEccVolatile = 0;     // nvmlEccCounterType_t
inline constexpr unsigned kEccAggregate = 1;
inline constexpr unsigned kFieldMemoryTemp = 82;  // NVML_FI_DEV_MEMORY_TEMP
inline constexpr unsigned kPstateUnknown = 32;
inline constexpr unsigned kValueTypeUnsignedInt = 1;  // nvmlValueType_t
inline constexpr unsigned kValueTypeUnsignedLongLong = 3;

struct Memory_v1 {  // nvmlMemory_t
  unsigned long long total, free, used;
};
struct Memory_v2 {  // nvmlMemory_v2_t: "reserved" is driver/firmware memory, not in "used"
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
inline constexpr unsigned kMemory_v2_version = static_cast<unsigned>(sizeof(Memory_v2)) | (2u << 24);

// Process records: the stride differs per entry point version (a wrong stride garbles PIDs).
struct ProcessInfo_v1 {  // nvmlDeviceGet*RunningProcesses (no suffix)
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct ProcessInfo_v2 {  // _v2, and _v3 on most drivers
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
struct ProcessInfo_v3cc {  // _v3 on the drivers whose nvml.h briefly added usedGpuCcProtectedMemory
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
};
static_assert(sizeof(ProcessInfo_v1) == 16 && sizeof(ProcessInfo_v2) == 24 && sizeof(ProcessInfo_v3cc) == 32);
static_assert(sizeof(Memory_v2) == 40);
inline constexpr unsigned long long kValueNotAvailable = ~0ull;  // usedGpuMemory under WDDM etc.

struct BAR1Memory {  // nvmlBAR1Memory_t
  unsigned long long bar1Total, bar1Free, bar1Used;
};

struct Utilization {  // nvmlUtilization_t
  unsigned int gpu, memory;
};

// nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v3; older entry points write a 16-byte busId first,
// then the same domain/bus/device words, so those offsets are read for every version.
struct PciInfo {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
  unsigned int reserved[4];  // slack for the v1 layout's reserved words
};

union Value {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  int siVal;
};
struct FieldValue {  // nvmlFieldValue_t
  unsigned int fieldId, scopeId;
  long long timestamp, latencyUsec;
  unsigned int valueType;
  Return nvmlReturn;
  Value value;
};
static_assert(sizeof(FieldValue) == 40);

// Per-process utilization samples (nvmlProcessUtilizationSample_t): timeStamp in CPU microseconds.
struct ProcessUtilizationSample {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil, memUtil, encUtil, decUtil;
};
static_assert(sizeof(ProcessUtilizationSample) == 32);

// nvmlViolationTime_t: referenceTime in microseconds, violationTime in nanoseconds (both running counters).
struct ViolationTime {
  unsigned long long referenceTime, violationTime;
};
inline constexpr unsigned kPerfPolicyPower = 0;  // nvmlPerfPolicyType_t
inline constexpr unsigned kPerfPolicyThermal = 1;

inline constexpr unsigned kRetiredMultipleSbe = 0;  // nvmlPageRetirementCause_t
inline constexpr unsigned kRetiredDbe = 1;

// Events (nvmlEventSet_t, nvmlEventData_t as nvmlEventSetWait_v2 fills it; v1 stops before the ids).
using EventSet = struct EventSetOpaque*;
struct EventData {
  Device device;
  unsigned long long eventType, eventData;
  unsigned int gpuInstanceId, computeInstanceId;
};
static_assert(sizeof(EventData) == 32);
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x8;

inline constexpr unsigned kStringBufferSize = 96;  // >= NVML_DEVICE_NAME_V2_BUFFER_SIZE / UUID_V2 (96/96)

}  // namespace gpumem::nvml::abi
