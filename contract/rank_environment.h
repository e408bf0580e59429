// The environment a launcher gives each rank: torchrun's variables, which any PyTorch trainer
// reads, and meshtest's own (docs/contracts.md). One table of names, so that the launcher
// (harness/run/launch.cpp, run_loop.cpp), the fork server, which must not tell servers apart by a
// rank's or a case's values, meshtrain (trainer/distributed/) and the tests agree.
#pragma once

namespace contract::rank_environment {

// torchrun's (torch.distributed.elastic), one value per rank.
inline constexpr char kRank[] = "RANK";
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kRoleRank[] = "ROLE_RANK";
inline constexpr char kGroupRank[] = "GROUP_RANK";
inline constexpr char kRoleName[] = "ROLE_NAME";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kRoleWorldSize[] = "ROLE_WORLD_SIZE";
inline constexpr char kGroupWorldSize[] = "GROUP_WORLD_SIZE";
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";
inline constexpr char kRestartCount[] = "TORCHELASTIC_RESTART_COUNT";
inline constexpr char kMaxRestarts[] = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr char kErrorFile[] = "TORCHELASTIC_ERROR_FILE";  // where @record writes an uncaught exception

// meshtest's own: the file a rank notes its collectives in, and the case and phase it runs.
inline constexpr char kCollectiveFile[] = "MESHTEST_COLLECTIVE_FILE";
inline constexpr char kCaseId[] = "MESHTEST_CASE_ID";
inline constexpr char kPhase[] = "MESHTEST_PHASE";
inline constexpr char kCaseDir[] = "MESHTEST_CASE_DIR";

// Every name above: what differs between two ranks, or two cases, of one program.
inline constexpr const char* kAll[] = {kRank,       kLocalRank,      kRoleRank,      kGroupRank,      kRoleName,
                                       kWorldSize,  kLocalWorldSize, kRoleWorldSize, kGroupWorldSize, kMasterAddr,
                                       kMasterPort, kRestartCount,   kMaxRestarts,   kErrorFile,      kCollectiveFile,
                                       kCaseId,     kPhase,          kCaseDir};

}  // namespace contract::rank_environment
