package ckpt

import (
	"fmt"
	"strings"
)

// A checkpoint's object tree: what a training script hands torch.save, and
// what DCP flattens into items. Leaves are tensors (tensorRef, an index
// into the state's tensors) or plain values (nil, bool, int, float64,
// string, pyTuple of them).
type (
	stateDict struct {
		keys []any // string or int
		vals []any
		// ordered: a collections.OrderedDict (a module's state_dict).
		ordered bool
		// fresh: the keys are strings built at run time (parameter
		// names), so each is its own object; otherwise they are
		// literals Python interns and shares.
		fresh bool
		// modules: a module state_dict's _metadata, the module paths in
		// the order state_dict() visits them (nil: none).
		modules []string
	}
	stateList []any
	tensorRef int
)

func (d *stateDict) set(k, v any) {
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
}

// State is the object a checkpoint holds: every tensor, and the tree that
// places them.
type State struct {
	Tensors []Tensor
	root    any
}

// FlatState is a module state_dict of tensors: an OrderedDict of name to
// tensor, in order (torch.save(model.state_dict()), or what DCP saves
// without an optimizer).
func FlatState(tensors []Tensor) *State {
	st := &State{Tensors: tensors}
	st.root = moduleDict(tensors, allIndices(len(tensors)))
	return st
}

func allIndices(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func moduleDict(tensors []Tensor, idx []int) *stateDict {
	d := &stateDict{ordered: true, fresh: true}
	var names []string
	for _, i := range idx {
		d.set(tensors[i].Name, tensorRef(i))
		names = append(names, tensors[i].Name)
	}
	d.modules = modulePaths(names)
	return d
}

// modulePaths is the _metadata key list state_dict() produces for
// parameters with these names: the root "" and every module path that
// owns a parameter, parents before children, in first-use order.
// Modules without parameters (activations, dropout) are not visible in
// the names and so are missing, the one way prism's _metadata differs
// from a real model's.
func modulePaths(names []string) []string {
	seen := map[string]bool{"": true}
	out := []string{""}
	for _, n := range names {
		parts := strings.Split(n, ".")
		for k := 1; k < len(parts); k++ {
			p := strings.Join(parts[:k], ".")
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// Optimizer modes.
const (
	OptNone = "none"
	// OptAdam is torch.optim.Adam: exp_avg and exp_avg_sq in the
	// parameter dtype and a float32 step per parameter, saved as
	// optimizer.state_dict() nests them.
	OptAdam = "adam"
	// OptAdamMixed is mixed-precision Adam with fp32 master weights
	// (Megatron-LM's and DeepSpeed's layout, MLPerf's 12 bytes of
	// optimizer state per parameter): fp32 exp_avg, exp_avg_sq and
	// master copy of every parameter.
	OptAdamMixed = "adam_mixed"
)

// Optimizers lists the optimizer modes.
var Optimizers = []string{OptNone, OptAdam, OptAdamMixed}

// DefaultStep is the step count prism's Adam state says it has taken.
const DefaultStep = 1000

// adamHyper is a param group's hyperparameters as torch.optim.Adam
// stores them, in its defaults' order (which is the saved dict's order,
// "params" last). torch 1.13's Adam has ten; later 2.x adds
// decoupled_weight_decay and defaults fused to None.
func adamHyper(v TorchVersion) (keys []string, vals []any) {
	keys = []string{"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "foreach", "capturable", "differentiable", "fused"}
	vals = []any{1e-3, pyTuple{0.9, 0.999}, 1e-8, 0, false, false, nil, false, false, false}
	if v == Torch2 {
		vals[9] = nil
		keys = append(keys, "decoupled_weight_decay")
		vals = append(vals, false)
	}
	return keys, vals
}

// optimizer tensors of parameter i of a model: which Model.Tensors hold
// its state.
type paramState struct {
	step, expAvg, expAvgSq, master int // -1: none
}

// State is what a training script saves for m: the model state_dict
// alone without an optimizer; with one, {"model": state_dict,
// "optimizer": optimizer.state_dict()} for torch.save, where the
// optimizer's state is keyed by parameter index as torch.optim keys it
// (fqnKeys false), or by parameter name as FSDP's optim_state_dict keys
// it for DCP (fqnKeys true). adam_mixed saves Megatron-LM's
// mixed-precision optimizer: {"optimizer": adam.state_dict(),
// "fp32_from_fp16_params": [[master, ...]]}.
func (m *Model) State(v TorchVersion, fqnKeys bool) *State {
	st := &State{Tensors: m.Tensors}
	model := moduleDict(m.Tensors, allIndices(m.nparams))
	if m.Optimizer == OptNone {
		st.root = model
		return st
	}
	states := &stateDict{fresh: fqnKeys}
	var ids []any
	var masters stateList
	for i, ps := range m.params {
		var key any = i
		if fqnKeys {
			key = m.Tensors[i].Name
		}
		ids = append(ids, key)
		s := &stateDict{}
		s.set("step", tensorRef(ps.step))
		s.set("exp_avg", tensorRef(ps.expAvg))
		s.set("exp_avg_sq", tensorRef(ps.expAvgSq))
		states.set(key, s)
		if ps.master >= 0 {
			masters = append(masters, tensorRef(ps.master))
		}
	}
	group := &stateDict{}
	keys, vals := adamHyper(v)
	for k := range keys {
		group.set(keys[k], vals[k])
	}
	params := make(stateList, len(ids))
	copy(params, ids)
	group.set("params", params)
	opt := &stateDict{}
	opt.set("state", states)
	opt.set("param_groups", stateList{group})
	if m.Optimizer == OptAdamMixed {
		outer := &stateDict{}
		outer.set("optimizer", opt)
		outer.set("fp32_from_fp16_params", stateList{masters})
		opt = outer
	}
	root := &stateDict{}
	root.set("model", model)
	root.set("optimizer", opt)
	st.root = root
	return st
}

// DCPItem is one entry of a DCP checkpoint: a tensor (Tensor >= 0) or a
// non-tensor value DCP torch.saves as bytes (Tensor -1).
type DCPItem struct {
	FQN    string
	Tensor int
	value  any
	path   pyTuple // the keys (str) and list indices (int) that reach it
}

// Items flattens the state as DCP's DefaultSavePlanner does
// (flatten_state_dict, torch 2.4's traversal): every dict is descended,
// keys joined with "."; a list is descended by index when it holds a
// tensor or a container that is, else it is one value; everything else
// is a leaf. torch 1.13's planner does not flatten (a nested value
// becomes one bytes item), so a 1.13 script flattens by hand, and prism
// writes the same keys for both versions.
func (st *State) Items() []DCPItem {
	var out []DCPItem
	var walk func(path pyTuple, v any)
	walk = func(path pyTuple, v any) {
		fqn := func() string {
			parts := make([]string, len(path))
			for i, p := range path {
				parts[i] = fmt.Sprint(p)
			}
			return strings.Join(parts, ".")
		}
		sub := func(k any) pyTuple { return append(append(pyTuple{}, path...), k) }
		switch x := v.(type) {
		case *stateDict:
			for i, k := range x.keys {
				walk(sub(fmt.Sprint(k)), x.vals[i])
			}
		case stateList:
			if !terminal(x) {
				for i, e := range x {
					walk(sub(i), e)
				}
				return
			}
			out = append(out, DCPItem{FQN: fqn(), Tensor: -1, value: x, path: path})
		case tensorRef:
			out = append(out, DCPItem{FQN: fqn(), Tensor: int(x), path: path})
		default:
			out = append(out, DCPItem{FQN: fqn(), Tensor: -1, value: x, path: path})
		}
	}
	if d, ok := st.root.(*stateDict); ok {
		walk(nil, d)
	}
	return out
}

// terminal is _traverse's _is_terminal for a list: no tensor in it and no
// container that is not terminal (a dict never is).
func terminal(l stateList) bool {
	for _, e := range l {
		switch x := e.(type) {
		case tensorRef, *stateDict:
			return false
		case stateList:
			if !terminal(x) {
				return false
			}
		}
	}
	return true
}
