package ckpt

import "fmt"

// TorchVersion names the PyTorch release whose file formats a layout
// follows. The formats differ in details a loader checks:
//
//	                        1.13                          2.x
//	torch.save records      data.pkl, data/<key> in       data.pkl, .format_version,
//	                        lexicographic key order,      .storage_alignment, byteorder,
//	                        version                       data/<key> in numeric order,
//	                                                      version, .data/serialization_id
//	DCP classes             torch.distributed._shard.     torch.distributed.checkpoint.
//	                        checkpoint.metadata;          metadata (TensorProperties too);
//	                        TensorProperties from         _StorageInfo from
//	                        _shard.sharded_tensor.        ....checkpoint.filesystem
//	                        metadata; _StorageInfo from
//	                        _shard.checkpoint.filesystem
//	DCP Metadata fields     state_dict_metadata,          + storage_meta (StorageMeta:
//	                        planner_data (None: no        checkpoint_id, save_id,
//	                        flattening), storage_data     load_id, modules), version
//	                                                      "1.0.0"; planner_data is the
//	                                                      flatten mapping (key -> path)
//	DCP default file split  one file per item             one file per rank
//	Adam param_groups       10 keys, fused False          + decoupled_weight_decay,
//	                                                      fused None
//
// 1.13 is checked against real torch 1.13 (Debian's python3-torch).
// 2.x follows the sources of torch's main branch after 2.6 (metadata.py,
// filesystem.py, default_planner.py, _traverse.py, serialization.py,
// inline_container.cc, adam.py) and is checked only against stand-in
// classes that mirror them.
type TorchVersion string

// Torch versions.
const (
	Torch113 TorchVersion = "1.13"
	Torch2   TorchVersion = "2.x"
)

// DefaultTorchVersion is the newest version checked against real torch.
const DefaultTorchVersion = Torch113

// TorchVersions lists the accepted versions.
var TorchVersions = []TorchVersion{Torch113, Torch2}

// ParseTorchVersion reads "1.13" or "2.x" ("" is the default).
func ParseTorchVersion(s string) (TorchVersion, error) {
	switch s {
	case "":
		return DefaultTorchVersion, nil
	case "1.13":
		return Torch113, nil
	case "2", "2.x":
		return Torch2, nil
	}
	return "", fmt.Errorf("ckpt: unknown torch_version %q (allowed: 1.13, 2.x)", s)
}
