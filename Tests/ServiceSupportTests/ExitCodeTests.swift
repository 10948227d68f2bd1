import Foundation
import Testing
import ServiceSupport

@Suite struct GatewayExitCodeTests {
    @Test func valuesAreTheSysexitsCodes() {
        #expect(GatewayExitCode.allCases.map(\.rawValue) == [0, 64, 69, 70, 74, 78])
        #expect(GatewayExitCode(rawValue: 78) == .config)
        #expect(GatewayExitCode(rawValue: 1) == nil)
        #expect(GatewayExitCode.unavailable.name == "EX_UNAVAILABLE")
        #expect(GatewayExitCode.ioError.description == "74 (EX_IOERR): state directory or readings database could not be read or written")
    }

    @Test func onlyWhatARestartCanFixIsRestarted() {
        #expect(GatewayExitCode.allCases.filter { !$0.isWorthRestarting } == [.cleanStop, .usage, .config])
    }

    /// docs/GATEWAY.md is the user-facing copy of the table: every code with its
    /// name, in one row each, and nothing the enum does not have.
    @Test func theDocumentedTableMatchesTheEnum() throws {
        let text = try String(contentsOfFile: repositoryRoot + "/docs/GATEWAY.md", encoding: .utf8)
        let section = try #require(text.components(separatedBy: "## Exit codes").dropFirst().first)
        let rows = section.split(separator: "\n").filter { $0.wholeMatch(of: /\| \d+ \| EX_\w+ \|.*/) != nil }
        #expect(rows.count == GatewayExitCode.allCases.count)
        for code in GatewayExitCode.allCases {
            #expect(rows.contains { $0.hasPrefix("| \(code.rawValue) | \(code.name) |") }, "\(code) is not documented")
        }
    }

    /// The unit file's RestartPreventExitStatus= lists exactly the failures a restart cannot fix.
    @Test func theUnitFileDoesNotRestartWhatCannotBeFixed() throws {
        let unit = try String(contentsOfFile: repositoryRoot + "/deploy/blecompanion-gateway.service", encoding: .utf8)
        let line = try #require(unit.split(separator: "\n").first { $0.hasPrefix("RestartPreventExitStatus=") })
        let listed = Set(line.dropFirst("RestartPreventExitStatus=".count).split(separator: " ").compactMap { Int32($0) })
        let expected = Set(GatewayExitCode.allCases.filter { !$0.isWorthRestarting && $0 != .cleanStop }.map(\.rawValue))
        #expect(listed == expected)
    }
}
