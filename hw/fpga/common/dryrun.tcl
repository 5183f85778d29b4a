# Checks the Vivado flow without Vivado, in a plain Tcl interpreter (Debian's tcl package):
#
#   tclsh dryrun.tcl <log> <script.tcl> [script arguments...]
#
# 1. Syntax: every file named in VDLA_TCL_FILES (a Tcl list; the script itself by default) is split into
#    commands with `info complete`; an unbalanced brace, bracket or quote fails the check, naming the file and
#    the line where the incomplete command starts.
# 2. Dry run: the script runs with argv set to the script arguments and every Vivado command stubbed: an
#    unknown command (create_project, ipx::*, get_bd_pins, ...) is logged as one line to <log>, "CALL", the
#    command and its arguments separated by tabs, and returns a placeholder object "<command>", except that `get_property PROGRESS` reports 100% and
#    `get_property DIRECTORY` a directory. `source` of a file logs "SOURCE<tab><path>" and runs it (a missing
#    file fails); `file copy` logs "COPY<tab><from><tab><to>" instead of copying (the sources are Vivado's);
#    `exit` with a non-zero code fails the run.
# Prints "ok" and exits 0, or prints the failure and exits 1. tests/test_fpga_flow.py reads the log and checks
# what the script names (files, ports, addresses) against the RTL and the driver.

rename exit dryrun_real_exit
if {[llength $argv] < 2} {
  puts "usage: tclsh dryrun.tcl <log> <script.tcl> \[args...\]"
  dryrun_real_exit 2
}
set dryrun_log [open [lindex $argv 0] w]
set dryrun_script [lindex $argv 1]

proc dryrun_fail {msg} {
  puts "FAIL: $msg"
  dryrun_real_exit 1
}

proc dryrun_syntax {path} {
  if {![file readable $path]} { dryrun_fail "$path: no such file" }
  set f [open $path]
  set text [read $f]
  close $f
  set cmd ""
  set start 0
  set n 0
  foreach line [split $text "\n"] {
    incr n
    if {$cmd eq ""} { set start $n }
    append cmd $line "\n"
    if {[info complete $cmd]} { set cmd "" }
  }
  if {[string trim $cmd] ne ""} { dryrun_fail "$path:$start: incomplete command (unbalanced braces, brackets or quotes)" }
}

set files [expr {[info exists env(VDLA_TCL_FILES)] ? $env(VDLA_TCL_FILES) : [list $dryrun_script]}]
foreach path $files { dryrun_syntax $path }

# ---- the stubbed run ------------------------------------------------------------------------------------------
proc dryrun_log {line} {
  puts $::dryrun_log $line
  flush $::dryrun_log
}

proc unknown {args} {
  dryrun_log [join [list CALL {*}$args] "\t"]
  set cmd [lindex $args 0]
  if {$cmd eq "get_property"} {
    switch -- [lindex $args 1] {
      PROGRESS { return "100%" }
      DIRECTORY { return [file join [pwd] dryrun_run_dir] }
    }
  }
  return "<[string trimleft $cmd :]>"
}

rename source dryrun_real_source
proc source {path} {
  dryrun_log "SOURCE\t$path"
  if {![file readable $path]} { dryrun_fail "source $path: no such file" }
  dryrun_syntax $path
  uplevel #0 [list dryrun_real_source $path]
}

rename file dryrun_real_file
proc file {sub args} {
  if {$sub eq "copy"} {
    dryrun_log [join [list COPY {*}[lrange $args end-1 end]] "\t"]
    return
  }
  return [uplevel 1 [list dryrun_real_file $sub {*}$args]]
}

proc exit {{code 0}} {
  if {$code} { dryrun_fail "the script exits with code $code" }
  dryrun_real_exit 0
}

set argv [lrange $argv 2 end]
set argc [llength $argv]
set argv0 $dryrun_script
if {[catch {source $dryrun_script} err opts]} {
  dryrun_fail "$dryrun_script: $err\n[dict get $opts -errorinfo]"
}
close $dryrun_log
puts ok
